#!/bin/bash
# Does one emulated node's compute slow another's? The nodes of scripts/testcluster.sh share one machine's caches and
# memory: matrix-fabric.yaml's 1-worker ResNet-50 step alone on CPU 0, then beside the same step looping on CPU 1,
# alternating, 3 rounds of 3 windows each. Prints img/s per window ("alone" / "beside").
#   benchmarks/co_runner.sh            (from the repository root, after `make install-test`)
set -u
W="$PWD/.venv/bin/python $PWD/models/workloads/resnet50/pytorch_worker.py --batch-size 32 --image-size 64 --threads 1 --no-channels-last"
for round in 1 2 3; do
  taskset -c 0 $W --warmup-steps 2 --steps 3 --repeats 3 --out /tmp/corun-alone.jsonl 2>&1 | grep -o "repeat [0-9]: [0-9.]* img/s" | sed "s/^/alone $round /"
  taskset -c 1 timeout 120 $W --warmup-steps 0 --steps 100000 --repeats 1 --out /dev/null >/dev/null 2>&1 &
  co=$!
  sleep 8
  taskset -c 0 $W --warmup-steps 2 --steps 3 --repeats 3 --out /tmp/corun-with.jsonl 2>&1 | grep -o "repeat [0-9]: [0-9.]* img/s" | sed "s/^/beside $round /"
  kill $co; wait $co 2>/dev/null
done
