#!/bin/bash
# Seed 003's start script: the allocator settings it exports apply to the run, whatever the shell
# memplan runs in (memplan plan --launch START_BASELINE_7B_TRAINING.sh).
export PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128,expandable_segments:True"
export TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=4
python3 train_baseline.py --config train.yaml
