#!/usr/bin/env bash
# On a machine with a CUDA GPU: build ddpc in place for that GPU, run the
# `gpu`-marked tests, then the GPU benchmarks. Each step has a time limit and
# its own log; a failing step does not stop the later ones.
#
#     bash benchmarks/gpu_suite.sh [LOG_DIR] [STEP...]
#
# STEPs: facts build tests bench (default: these four, in this order), all-tests,
# or one benchmark (the names in `bench`).
# The benchmarks compare with PyTorch when the Python running them has it.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-gpu-logs}
shift || true
steps=${*:-facts build tests bench}
steps=${steps/bench/copy_bandwidth train_step allreduce_nccl ddp_cuda ddp_cpu loader_cuda loader_workers rnn_cuda}
mkdir -p "$logs"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
summary=$logs/summary.txt
: >"$summary"

step() {  # step NAME SECONDS COMMAND...: run COMMAND under a limit, log to LOG_DIR/NAME.log
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$(($(date +%s) - start))" \
        "$(tail -n 1 "$logs/$name.log" | cut -c1-90)" | tee -a "$summary"
}

for s in $steps; do
    case $s in
    facts)
        step facts 60 bash -c 'nvidia-smi; nvcc --version | tail -n 2; python3 --version;
            python3 -c "import numpy, sys; print(\"numpy\", numpy.__version__, sys.executable)";
            python3 -c "import torch; print(\"torch\", torch.__version__, torch.cuda.get_device_name())" || true;
            nproc; free -g | head -n 2'
        ;;
    build)
        # Only this GPU's architecture: half the kernel compile time of the default two.
        arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
        step build 420 env DDPC_CUDA_ARCHS="${DDPC_CUDA_ARCHS:-${arch:-90}}" python3 setup.py build_ext --inplace
        step doctor 60 python3 -m ddpc doctor
        ;;
    tests)
        step gpu-tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests
        ;;
    all-tests)  # the whole suite with a GPU present, over every core (needs pytest-xdist)
        step all-tests 400 python3 -m pytest -q -p no:cacheprovider -rfE -n "$(nproc)" tests
        ;;
    copy_bandwidth) step copy_bandwidth 120 python3 benchmarks/copy_bandwidth.py ;;
    train_step) step train_step 150 python3 benchmarks/train_step.py --device cuda ;;
    allreduce_nccl) step allreduce_nccl 150 python3 benchmarks/allreduce.py --backend nccl --nproc 1 ;;
    ddp_cuda) step ddp_cuda 150 python3 benchmarks/ddp.py --device cuda --ranks 1 ;;
    ddp_cpu)  # DDP's overlap on the cpu backend, where the machine has cores to spare
        step ddp_cpu 200 python3 benchmarks/ddp.py --ranks 1 2
        step ddp_cpu_4mb_buckets 200 python3 benchmarks/ddp.py --ranks 2 --bucket-cap-mb 4
        # A core per rank left to its collectives thread (8 threads per rank fill 16 cores).
        step ddp_cpu_7_threads 200 env DDPC_NUM_THREADS=7 OMP_NUM_THREADS=7 python3 benchmarks/ddp.py --ranks 2
        ;;
    loader_cuda)
        step loader_cuda 150 python3 benchmarks/loader.py --device cuda
        step loader_cuda_8_threads 150 python3 benchmarks/loader.py --device cuda --threads 8
        step loader_cuda_8_ahead 150 python3 benchmarks/loader.py --device cuda --threads 8 --prefetch 8
        ;;
    loader_workers)  # worker processes for a generic data set, where there are cores for them
        step loader_workers 300 python3 benchmarks/loader_workers.py --workers 2 4 8 ;;
    rnn_cuda) step rnn_cuda 150 python3 benchmarks/rnn.py --device cuda ;;
    *)
        echo "unknown step $s (see the list at the top)" >&2
        exit 2
        ;;
    esac
done
cat "$summary"
