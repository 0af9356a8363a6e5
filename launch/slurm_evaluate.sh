#!/usr/bin/env bash
# Evaluate a run's checkpoints with several workers: each array task is one `leaklab evaluate` worker on
# one GPU; the workers claim checkpoint x evaluation pairs (leaklab/claims.py), so any number may share
# the run, and a task that dies has its claim taken over after 10 minutes without a heartbeat.
# Train with evaluate.during_training=false first, then:
#   sbatch --array=0-3 launch/slurm_evaluate.sh runs/apps_cpt-<hash>
#SBATCH --job-name=leaklab-evaluate
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail

RUN_DIR=${1:?usage: sbatch --array=0-N launch/slurm_evaluate.sh RUN_DIR}
leaklab evaluate "$RUN_DIR"
