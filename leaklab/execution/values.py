"""Plain data across the sandbox boundary: a tagged-JSON codec from which the trusted side rebuilds only
builtin types (with `rich=True` also numpy, pandas, paths, dates and references); never pickle.
See docs/sandbox.md#plain-data-across-the-boundary.
"""

from __future__ import annotations

import base64
import collections
import datetime
import pathlib
import re
from collections.abc import Callable
from typing import Any

# Deep enough for any benchmark value, shallow enough that decoding cannot exhaust the C stack.
MAX_DEPTH = 100
# Python refuses to print ints of more than 4300 digits (sys.int_info.str_digits_check_threshold);
# bigger ones travel as hexadecimal, which has no such limit.
_MAX_DECIMAL_INT = 10**4000


_COLLECTIONS = {"$tuple": tuple, "$frozenset": frozenset, "$set": set}  # sent as the list of their items
_BINARY = {"$bytes": bytes, "$bytearray": bytearray}  # sent as base64


class UnsupportedValue(TypeError):
    """A value that has no plain-data form (a generator, a class instance, a lambda, ...)."""


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def encode(
    value: Any, _depth: int = 0, *, rich: bool = False, other: Callable[[Any], Any] | None = None
) -> Any:
    """A JSON-ready tree for `value`. Runs on the untrusted side, so it may be liberal: numpy scalars
    and arrays become their Python equivalents, subclasses of builtins become the builtin. `other`
    turns a value with no plain form into a tree (a reference) or raises UnsupportedValue."""
    if _depth > MAX_DEPTH:
        raise UnsupportedValue(f"value nested deeper than {MAX_DEPTH} levels")
    d = _depth + 1

    def enc(v: Any) -> Any:
        return encode(v, d, rich=rich, other=other)

    if value is None or type(value) in (bool, str):
        return value
    # A numpy scalar keeps its type (np.float64 is also a float, which would lose it).
    numpy_scalar = (type(value).__module__ or "").startswith("numpy") and type(value).__name__ != "ndarray"
    if rich and numpy_scalar and hasattr(value, "dtype") and hasattr(value, "item"):
        return {"$npscalar": [str(value.dtype), enc(value.item())]}
    if isinstance(value, int):
        number = int(value)
        return number if -_MAX_DECIMAL_INT < number < _MAX_DECIMAL_INT else {"$int": hex(number)}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, complex):
        return {"$complex": [value.real, value.imag]}
    if isinstance(value, list):
        return [enc(v) for v in value]
    for tag, kind in _BINARY.items():
        if isinstance(value, kind):
            return {tag: base64.b64encode(bytes(value)).decode("ascii")}
    for tag, kind in _COLLECTIONS.items():
        if isinstance(value, kind):
            return {tag: [enc(v) for v in value]}
    module = type(value).__module__ or ""
    if isinstance(value, dict):
        items = [[enc(k), enc(v)] for k, v in value.items()]
        if rich and isinstance(value, collections.Counter):
            return {"$counter": items}
        if rich and isinstance(value, collections.OrderedDict):
            return {"$ordereddict": items}
        return {"$dict": items}
    if rich and (tree := _rich_tree(value, module, enc)) is not _NO_FORM:
        return tree
    # numpy without importing numpy: scalars have .item(), arrays .tolist().
    if module.startswith("numpy"):
        if hasattr(value, "tolist") and getattr(value, "ndim", 0):
            return enc(value.tolist())
        if hasattr(value, "item"):
            return enc(value.item())
    if other is not None:
        return other(value)
    raise UnsupportedValue(f"a {_type_name(value)} has no plain-data form")


_NO_FORM = object()  # `_rich_tree` of a value it has no form for


def _rich_tree(value: Any, module: str, enc: Callable[[Any], Any]) -> Any:
    """Rich mode's forms: paths, dates, numpy arrays, pandas Series and DataFrames; else _NO_FORM."""
    if isinstance(value, pathlib.PurePath):
        return {"$path": str(value)}
    if isinstance(value, datetime.datetime):
        return {"$datetime": datetime.datetime.isoformat(value)}
    if isinstance(value, datetime.date):
        return {"$date": datetime.date.isoformat(value)}
    if isinstance(value, datetime.timedelta):
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    kind = type(value).__name__
    if module.startswith("numpy") and kind == "ndarray":
        return {"$ndarray": [str(value.dtype), list(map(int, value.shape)), enc(value.tolist())]}
    if module.startswith("pandas") and kind == "Series":
        return {"$series": [str(value.dtype), enc(value.name), enc(list(value.index)), enc(value.tolist())]}
    if module.startswith("pandas") and kind == "DataFrame":
        columns = [enc(value.iloc[:, i].tolist()) for i in range(value.shape[1])]
        dtypes = [str(t) for t in value.dtypes]
        return {"$dataframe": [enc(list(value.columns)), enc(list(value.index)), dtypes, columns]}
    return _NO_FORM


# dtype names as numpy and pandas print them ("int64", "<U5", "datetime64[ns]", "category");
# anything else is rebuilt as object.
_DTYPE = re.compile(r"[<>|=]?[a-zA-Z]{1,16}[0-9]{0,3}(\[[a-z]{1,3}\])?")


def decode(
    tree: Any,
    _depth: int = 0,
    *,
    rich: bool = False,
    ref: Callable[[int], Any] | None = None,
    jref: Callable[[int], Any] | None = None,
) -> Any:
    """The value back from `encode`'s tree, built only from builtin types (and, with `rich`, numpy's
    and pandas' own constructors; with `ref` and `jref`, references to the other side's objects);
    ValueError when malformed."""
    if _depth > MAX_DEPTH + 1:
        raise ValueError("value nested too deeply")
    d = _depth + 1

    def dec(v: Any) -> Any:
        return decode(v, d, rich=rich, ref=ref, jref=jref)

    kind = type(tree)
    if tree is None or kind in (bool, int, float, str):
        return tree
    if kind is list:
        return [dec(v) for v in tree]
    if kind is not dict or len(tree) != 1:
        raise ValueError(f"malformed value: {str(tree)[:80]}")
    ((tag, body),) = tree.items()
    try:
        if tag in _COLLECTIONS:
            return _COLLECTIONS[tag](dec(v) for v in _as_list(body))
        if tag == "$dict":
            return {dec(k): dec(v) for k, v in (_as_pair(p) for p in _as_list(body))}
        if tag == "$int" and type(body) is str:
            return int(body, 16)
        if tag == "$complex":
            re_, im = _as_pair(body)
            if type(re_) is not float or type(im) is not float:
                raise ValueError("complex parts must be floats")
            return complex(re_, im)
        if tag in _BINARY and type(body) is str:
            return _BINARY[tag](base64.b64decode(body, validate=True))
        if tag == "$ref" and ref is not None and type(body) is int:
            return ref(body)
        if tag == "$jref" and jref is not None and type(body) is int:
            return jref(body)
        if rich:
            return _decode_rich(tag, body, dec)
    except (TypeError, OverflowError) as err:  # an unhashable set member or dict key, a bad date
        raise ValueError(f"malformed {tag}: {err}") from err
    raise ValueError(f"malformed value with tag {tag!r}")


def _dtype(name: Any) -> str:
    return name if type(name) is str and _DTYPE.fullmatch(name) else "object"


def _decode_rich(tag: str, body: Any, dec: Callable[[Any], Any]) -> Any:
    if tag in ("$counter", "$ordereddict"):
        kind = collections.Counter if tag == "$counter" else collections.OrderedDict
        return kind({dec(k): dec(v) for k, v in (_as_pair(p) for p in _as_list(body))})
    if tag == "$path" and type(body) is str:
        return pathlib.Path(body)
    if tag == "$npscalar":
        import numpy as np

        dtype, value = _as_pair(body)
        try:
            return np.dtype(_dtype(dtype)).type(dec(value))
        except Exception as err:
            raise ValueError(f"malformed $npscalar: {err}") from None
    if tag in ("$datetime", "$date") and type(body) is str and len(body) < 64:
        parse = datetime.datetime if tag == "$datetime" else datetime.date
        return parse.fromisoformat(body)
    if tag == "$timedelta" and type(body) is list and len(body) == 3 and all(type(x) is int for x in body):
        return datetime.timedelta(days=body[0], seconds=body[1], microseconds=body[2])
    if tag == "$ndarray":
        import numpy as np

        dtype, shape, data = _as_list(body) if len(_as_list(body)) == 3 else (None, None, None)
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError("malformed $ndarray shape")
        try:
            return np.array(dec(data), dtype=_dtype(dtype)).reshape(shape)
        except Exception as err:
            raise ValueError(f"malformed $ndarray: {err}") from None
    if tag in ("$series", "$dataframe"):
        import pandas as pd

        parts = _as_list(body)
        try:
            if tag == "$series" and len(parts) == 4:
                dtype, name, index, data = parts
                return pd.Series(dec(data), index=dec(index), name=dec(name), dtype=_dtype(dtype))
            if tag == "$dataframe" and len(parts) == 4 and type(parts[2]) is list and type(parts[3]) is list:
                columns, index, dtypes, data = dec(parts[0]), dec(parts[1]), parts[2], parts[3]
                frame = pd.DataFrame(
                    {i: pd.Series(dec(col), dtype=_dtype(t)) for i, (col, t) in enumerate(zip(data, dtypes))}
                )
                frame.columns = pd.Index(columns) if columns else frame.columns
                frame.index = pd.Index(index) if len(index) == len(frame) and index else frame.index
                return frame
        except ValueError:
            raise
        except Exception as err:
            raise ValueError(f"malformed {tag}: {err}") from None
    raise ValueError(f"malformed value with tag {tag!r}")


def _as_list(body: Any) -> list:
    if type(body) is not list:
        raise ValueError("expected a list")
    return body


def _as_pair(body: Any) -> list:
    if type(body) is not list or len(body) != 2:
        raise ValueError("expected a pair")
    return body


def short_repr(value: Any, limit: int = 200) -> str:
    """repr for reports, cut to `limit` characters (reprs of benchmark outputs can be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
