"""Perturbed task sets that evaluations compare against, one job per module:

identifiers   parse a task's code: identifier roles and scopes, what may be renamed (`analyse_task`)
renaming      apply a name mapping to program, prompt, tests and prose (`rename_task`, `propose_renames`)
vocabulary    synonym tables and prefixes: candidate new names in the original's style
examples      find the examples a prompt shows, mutate their inputs, write new inputs and outputs back
llm           the LLM backend: leaklab's renaming prompt, and reading a proposal back as a name mapping
variants      SrDetection's variants: rename + replace examples, verify, keep (`make_variants`)
rewriting     MRI's rule-based code rewriting: one logic change per task, validated in the sandbox
unittest_rewrite  the same for tasks whose tests are a unittest class (BigCodeBench): expected literals
              regenerated in the sandbox
mutation      MRI's mutation: seeded word scrambling, capitalisation and character noise on the prose
mri_llm       MRI's optional LLM backend: paraphrases and rewrites by a model, checked as the rules' are
mri_sets      MRI's perturbed sets: built once per benchmark, cached, the run's copy and its summary
store         SrDetection's variant sets: sandboxed executors, building, JSON form, cache and run's copy
set_store     the per-benchmark cache of sets built per task (variants, MRI sets) and the run's copy
"""
