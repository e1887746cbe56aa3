"""Command lines that launch PyTorch jobs as written in public repositories and tutorials, each with
its source, adapted only as far as needed to run on one machine without a GPU: at most 2 nodes on
loopback, free ports, fewer workers, shell variables given values. Every script, module and
executable a line names is a program that records its argv and environment (corpus_test.py).

  source    where the line is written: repository and file
  original  the line as written there
  args      the launcher's arguments as run here, for torchrun and ddprun alike. Placeholders:
            {port} {port2} free ports, {node_rank} each node's index, {is_host} 1 on node 0 and 0
            elsewhere, {cwd} the job's working folder
  adapted   what was changed to run here, if anything
  launcher  "torchrun" (python -m torch.distributed.run; the default) or "launch"
            (python -m torch.distributed.launch, which ddprun runs as `ddprun launch`)
  nodes     how many nodes run it at once (default 1)
  env       environment the line sets (a manifest's PET_* variables, prefixes such as
            CUDA_VISIBLE_DEVICES=0,1), placeholders as in args
  scripts   the script paths to create, relative to the working folder (default train.py)
  modules   the modules -m names
  executables  the programs --no-python runs, found on PATH
  log_dir   --log_dir as given, whose files are compared
  differs   environment variables that differ deliberately (corpus_test.py's DIFFERENCES)
"""

# A job on one node without a store port (--standalone, or torch 2.14's implicit c10d): the OS
# picks the store's port and a random run id is drawn, and the round's node is named by IP.
IMPLICIT_C10D = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}
# A c10d job on more than one node: node 0's address (an IP here, torch's FQDN) and the port of
# the round's worker store, which ddprun starts afresh for each round where torch reuses the
# rendezvous store.
MULTI_NODE_C10D = {"MASTER_ADDR", "MASTER_PORT"}
# One node, c10d, an endpoint on this host: the host named by IP, and the workers' store is the
# rendezvous store (torch 2.14 gives its workers another free port).
ONE_NODE_C10D = {"MASTER_ADDR", "MASTER_PORT"}

CASES = [
    # --- `-m` and `--` -------------------------------------------------------------------------
    dict(source="karpathy/nanochat speedrun.sh",
         original="torchrun --standalone --nproc_per_node=$NPROC_PER_NODE -m scripts.base_train "
                  "-- --depth=20 --target-param-data-ratio=20 --run=$WANDB_RUN",
         args=["--standalone", "--nproc_per_node=2", "-m", "scripts.base_train", "--",
               "--depth=20", "--target-param-data-ratio=20", "--run=dummy"],
         adapted="NPROC_PER_NODE=2, WANDB_RUN=dummy", modules=["scripts.base_train"],
         differs=IMPLICIT_C10D),
    dict(source="karpathy/nanochat speedrun.sh",
         original="torchrun --standalone --nproc_per_node=$NPROC_PER_NODE -m scripts.chat_eval -- "
                  "-i mid",
         args=["--standalone", "--nproc_per_node=2", "-m", "scripts.chat_eval", "--", "-i", "mid"],
         adapted="NPROC_PER_NODE=2", modules=["scripts.chat_eval"], differs=IMPLICIT_C10D),
    dict(source="iluvn01/VFMTok scripts/autoregressive/torchrun.sh",
         original="torchrun --nproc_per_node $PROC_PER_NODE --master_addr $MASTER_ADDR "
                  "--master_port ${MASTER_PORT:-5678} --nnodes $NODE_COUNT --node_rank $NODE_RANK "
                  "-- ${@:1}",
         args=["--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", "{port}",
               "--nnodes", "2", "--node_rank", "{node_rank}", "--", "train.py", "--config", "a"],
         adapted="2 nodes of 1 worker, ${@:1} = train.py --config a", nodes=2),
    dict(source="tedyhabtegebrial/ultra_light_trainer run_example.sh",
         original="torchrun --nnodes=1 --max_restarts=0 --rdzv_id=${RANDOM} --rdzv_backend=c10d "
                  "--nproc_per_node=gpu --rdzv_endpoint=localhost:29403 -m "
                  "examples.train_single_gpu",
         args=["--nnodes=1", "--max_restarts=0", "--rdzv_id=4242", "--rdzv_backend=c10d",
               "--nproc_per_node=2", "--rdzv_endpoint=localhost:{port}", "-m",
               "examples.train_single_gpu"],
         adapted="gpu → 2 (no GPU here), RANDOM=4242, a free port",
         modules=["examples.train_single_gpu"], differs=ONE_NODE_C10D),
    dict(source="krmayankb/open_clip scripts/train.sh",
         original="torchrun --nproc_per_node 2 -m training.main --model \"ViT-B-16\" ... "
                  "--batch-size 128 --workers 4",
         args=["--nproc_per_node", "2", "--master_port={port}", "-m", "training.main", "--model",
               "ViT-B-16", "--dataset-type", "webdataset", "--precision", "amp", "--batch-size",
               "128", "--workers", "4"],
         adapted="a free --master_port (torch's implicit c10d otherwise); data paths left out",
         modules=["training.main"]),
    # --- torchtitan and torchchat ---------------------------------------------------------------
    dict(source="pytorch/torchtitan run_train.sh",
         original="torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d "
                  "--rdzv_endpoint=\"localhost:0\" --local-ranks-filter ${LOG_RANK} --role rank "
                  "--tee 3 -m torchtitan.train --module ${MODULE} --config ${CONFIG} \"$@\"",
         args=["--nproc_per_node=2", "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0",
               "--local-ranks-filter", "0", "--role", "rank", "--tee", "3", "-m",
               "torchtitan.train", "--module", "llama3", "--config", "debug"],
         adapted="NGPU=2, LOG_RANK=0", modules=["torchtitan.train"],
         differs={"MASTER_ADDR", "MASTER_PORT"}),
    dict(source="pytorch/torchtitan run_llama_train.sh",
         original="torchrun --nproc_per_node=${NGPU} --rdzv_endpoint=\"localhost:5972\" "
                  "--local-ranks-filter ${LOG_RANK} --role rank --tee 3 train.py "
                  "--job.config_file ${CONFIG_FILE} --training.checkpoint_folder "
                  "/data/users/whc/torchtrain",
         args=["--nproc_per_node=2", "--rdzv_endpoint=localhost:{port}", "--local-ranks-filter",
               "0,1", "--role", "rank", "--tee", "3", "train.py", "--job.config_file", "a.toml",
               "--training.checkpoint_folder", "/data/users/whc/torchtrain"],
         adapted="NGPU=2, LOG_RANK=0,1, a free port for 5972"),
    dict(source="pytorch/torchtitan multinode_trainer.slurm",
         original="srun torchrun --nnodes 4 --nproc_per_node 8 --rdzv_id 101 --rdzv_backend c10d "
                  "--rdzv_endpoint \"$head_node_ip:29500\" -m torchtitan.train --module ${MODULE} "
                  "--config ${CONFIG} \"$@\"",
         args=["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_id", "101", "--rdzv_backend",
               "c10d", "--rdzv_endpoint", "127.0.0.1:{port}", "-m", "torchtitan.train",
               "--module", "llama3", "--config", "debug"],
         adapted="2 nodes of 1 worker on loopback", nodes=2, modules=["torchtitan.train"],
         differs=MULTI_NODE_C10D),
    dict(source="pytorch/torchtitan run_8node.sh",
         original="torchrun --nproc_per_node 8 --rdzv_backend c10d --rdzv_id 101 "
                  "--rdzv_endpoint \"10.140.60.12:29500\" --local-ranks-filter 0 ./train.py "
                  "--job.config_file ./train_configs/llama2_70b.toml",
         args=["--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_id", "101",
               "--rdzv_endpoint", "127.0.0.1:{port}", "--local-ranks-filter", "0", "./train.py",
               "--job.config_file", "./train_configs/llama2_70b.toml"],
         adapted="one node of 2 workers, the endpoint on loopback", differs=ONE_NODE_C10D),
    dict(source="pytorch/torchchat run_dist.sh",
         original="torchrun --nproc-per-node=$NGPU --master_port=$PORT --local-ranks-filter "
                  "${LOG_RANK} --role rank --tee 3 dist_run.py --pp 2 llama3",
         args=["--nproc-per-node=2", "--master_port={port}", "--local-ranks-filter", "0,1",
               "--role", "rank", "--tee", "3", "dist_run.py", "--pp", "2", "llama3"],
         adapted="NGPU=2, LOG_RANK=0,1", scripts=["dist_run.py"]),
    # --- the static backend with an endpoint, and the node rank ---------------------------------
    dict(source="pytorch/examples distributed/tensor_parallelism/run_example.sh",
         original="torchrun --nnodes=1 --nproc_per_node=${2:-4} --rdzv_id=101 "
                  "--rdzv_endpoint=\"localhost:5972\" ${1:-two_d_parallel_example.py}",
         args=["--nnodes=1", "--nproc_per_node=2", "--rdzv_id=101",
               "--rdzv_endpoint=localhost:{port}", "two_d_parallel_example.py"],
         adapted="2 workers, a free port for 5972", scripts=["two_d_parallel_example.py"]),
    dict(source="allenai/OLMo scripts/beaker/amberish7.sh",
         original="torchrun --nnodes \"${NUM_NODES}:${NUM_NODES}\" --nproc-per-node 8 --rdzv_id "
                  "12347 --rdzv_backend static --rdzv_endpoint "
                  "\"${BEAKER_LEADER_REPLICA_HOSTNAME}:29400\" --node_rank "
                  "\"${BEAKER_REPLICA_RANK}\" --rdzv_conf 'read_timeout=420' scripts/train.py "
                  "configs/amberish7-weka.yaml --run_name=\"${GANTRY_TASK_NAME}\"",
         args=["--nnodes", "2:2", "--nproc-per-node", "1", "--rdzv_id", "12347", "--rdzv_backend",
               "static", "--rdzv_endpoint", "127.0.0.1:{port}", "--node_rank", "{node_rank}",
               "--rdzv_conf", "read_timeout=420", "scripts/train.py",
               "configs/amberish7-weka.yaml", "--run_name=amberish7"],
         adapted="2 nodes of 1 worker, the leader on loopback", nodes=2,
         scripts=["scripts/train.py"]),
    dict(source="ZetangForward/CrazyCode projects/custom_llama/scripts/"
                "run_vqllama_embed_quantizer.sh",
         original="torchrun --nnodes=1:4 --nproc-per-node=4 --max-restarts=3 --rdzv_id=123 "
                  "--rdzv_backend=c10d --rdzv_endpoint=worker-0:1234 train_pl_v2.py",
         args=["--nnodes=1:2", "--nproc-per-node=1", "--max-restarts=3", "--rdzv_id=123",
               "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:{port}", "train_pl_v2.py"],
         adapted="1:4 → 1:2 with both nodes running (the round forms at MAX without waiting "
                 "last_call_timeout), 1 worker each, the endpoint on loopback",
         nodes=2, scripts=["train_pl_v2.py"], differs=MULTI_NODE_C10D),
    dict(source="tonyzhao-jt/LLM-PQ tests/run_main.sh",
         original="torchrun --nnodes=2 --nproc_per_node=4 --master_addr net-g14 --master_port "
                  "6666 --node_rank=1 main.py",
         args=["--nnodes=2", "--nproc_per_node=1", "--master_addr", "127.0.0.1", "--master_port",
               "{port}", "--node_rank={node_rank}", "main.py"],
         adapted="both nodes here, 1 worker each", nodes=2, scripts=["main.py"]),
    dict(source="0-1CxH/megatron-wrap run.sh",
         original="torchrun $DISTRIBUTED_ARGS main.py (DISTRIBUTED_ARGS=\"--nproc-per-node "
                  "${GPUS_PER_NODE:-8} --nnodes ${NNODES:-1} --node-rank ${NODE_RANK:-0} "
                  "--master-addr ${MASTER_ADDR:-$(hostname)} --master-port "
                  "${MASTER_PORT:-22334}\")",
         args=["--nproc-per-node", "2", "--nnodes", "1", "--node-rank", "0", "--master-addr",
               "localhost", "--master-port", "{port}", "main.py"],
         adapted="2 workers, localhost, a free port", scripts=["main.py"]),
    dict(source="NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh",
         original="torchrun ${DISTRIBUTED_ARGS[@]} examples/classes/pretrain_gpt.py "
                  "(--nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --master_addr "
                  "$MASTER_ADDR --master_port $MASTER_PORT)",
         args=["--nproc_per_node", "1", "--nnodes", "2", "--master_addr", "127.0.0.1",
               "--master_port", "{port}", "examples/classes/pretrain_gpt.py", "--num-layers",
               "96"],
         adapted="2 nodes of 1 worker; NODE_RANK from PET_NODE_RANK, as a scheduler would give it",
         nodes=2, env={"PET_NODE_RANK": "{node_rank}"},
         scripts=["examples/classes/pretrain_gpt.py"]),
    dict(source="LambdaLabsML/torchtitan healthcheck-torchrun.sh",
         original="torchrun --master-addr ${HEAD_IP} --master-port ${HEAD_PORT} --node-rank "
                  "${SLURM_NODEID} --nnodes ${SLURM_NNODES} --nproc-per-node 4 healthcheck.py "
                  "\"$@\"",
         args=["--master-addr", "127.0.0.1", "--master-port", "{port}", "--node-rank",
               "{node_rank}", "--nnodes", "2", "--nproc-per-node", "1", "healthcheck.py"],
         adapted="2 nodes of 1 worker", nodes=2, scripts=["healthcheck.py"]),
    dict(source="eth-easl/fmengine scripts/finetune/finetune_llama_3b.sh",
         original="torchrun --nnodes 1 --nproc-per-node 4 --node_rank 0 cli/train.py "
                  "--output_dir /workspace/.cache/models",
         args=["--nnodes", "1", "--nproc-per-node", "2", "--node_rank", "0", "cli/train.py",
               "--output_dir", "/workspace/.cache/models"],
         adapted="2 workers", scripts=["cli/train.py"], differs=IMPLICIT_C10D),
    # --- logs -----------------------------------------------------------------------------------
    dict(source="LambdaLabsML/distributed-training-guide 02-multi-gpu/README.md",
         original="TORCHELASTIC_ERROR_FILE=../error.json OMP_NUM_THREADS=1 torchrun --standalone "
                  "--nnodes 1 --nproc-per-node gpu --redirects 3 --log-dir ../logs train_llm.py "
                  "--experiment-name gpt2-openwebtext-multi-gpu-$(date +%Y-%m-%dT%H-%M-%S) "
                  "--dataset-name Skylion007/openwebtext --model-name openai-community/gpt2 "
                  "--batch-size 64",
         args=["--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--redirects", "3",
               "--log-dir", "../logs", "train_llm.py", "--experiment-name",
               "gpt2-openwebtext-multi-gpu-2026-01-01T00-00-00", "--dataset-name",
               "Skylion007/openwebtext", "--model-name", "openai-community/gpt2", "--batch-size",
               "64"],
         adapted="gpu → 2 (no GPU here)", scripts=["train_llm.py"],
         env={"TORCHELASTIC_ERROR_FILE": "../error.json", "OMP_NUM_THREADS": "1"},
         log_dir="../logs", differs=IMPLICIT_C10D),
    dict(source="LambdaLabsML/distributed-training-guide 04-job-launchers-bash/README.md",
         original="$(which python) -m torch.distributed.run --rdzv-id multi-node-tmux "
                  "--rdzv-backend c10d --rdzv-endpoint $(head -n 1 hosts):5001 --nnodes "
                  "$(wc -l < hosts) --nproc-per-node gpu --redirects 3 --log-dir ../logs "
                  "../03-multi-node/train_llm.py --experiment-name multi-node-tmux --dataset-name "
                  "tatsu-lab/alpaca --model-name openai-community/gpt2",
         args=["--rdzv-id", "multi-node-tmux", "--rdzv-backend", "c10d", "--rdzv-endpoint",
               "127.0.0.1:{port}", "--nnodes", "2", "--nproc-per-node", "1", "--redirects", "3",
               "--log-dir", "../logs", "../03-multi-node/train_llm.py", "--experiment-name",
               "multi-node-tmux", "--dataset-name", "tatsu-lab/alpaca", "--model-name",
               "openai-community/gpt2"],
         adapted="2 nodes here of 1 worker (gpu → 1)", nodes=2,
         scripts=["../03-multi-node/train_llm.py"], log_dir="../logs", differs=MULTI_NODE_C10D),
    dict(source="interTwin-eu/itwinai tutorials/distributed-ml/torch-tutorial-0-basics/"
                "ddp_slurm.sh",
         original="torchrun --log_dir='logs' --nnodes=$SLURM_NNODES "
                  "--nproc_per_node=$SLURM_GPUS_PER_NODE --rdzv_id=$SLURM_JOB_ID "
                  "--rdzv_conf=is_host=$(((SLURM_NODEID)) && echo 0 || echo 1) "
                  "--rdzv_backend=c10d --rdzv_endpoint='$(scontrol show hostnames ... | head -n "
                  "1)'i:29500 $TRAINING_CMD",
         args=["--log_dir=logs", "--nnodes=2", "--nproc_per_node=1", "--rdzv_id=4711",
               "--rdzv_conf=is_host={is_host}", "--rdzv_backend=c10d",
               "--rdzv_endpoint=127.0.0.1:{port}", "train.py", "-s", "ddp"],
         adapted="2 nodes of 1 worker, SLURM_JOB_ID=4711, the endpoint on loopback, "
                 "TRAINING_CMD='train.py -s ddp'",
         nodes=2, log_dir="logs", differs=MULTI_NODE_C10D),
    dict(source="interTwin-eu/itwinai docs (the same pattern with `python train.py`)",
         original="torchrun --nnodes=2 --nproc_per_node=4 --rdzv_id=151152 "
                  "--rdzv_conf=is_host=... --rdzv_backend=c10d --rdzv_endpoint=...:29500 "
                  "python train.py",
         args=["--nnodes=1", "--nproc_per_node=1", "--rdzv_id=151152", "--rdzv_backend=c10d",
               "--rdzv_endpoint=127.0.0.1:{port}", "python", "train.py"],
         adapted="one node of 1 worker: `python` is taken as the script, so every worker fails "
                 "(exit 1 from both launchers)"),
    # --- PET_* variables of a manifest ----------------------------------------------------------
    dict(source="oracle-quickstart/oci-hpc-oke docs/running-pytorch-jobs-on-oke-using-"
                "hostnetwork-with-rdma.md (PyTorchJob, etcd)",
         original="torchrun --nproc_per_node=1 --local_addr=$POD_NAME --nproc_per_node=1 train.py "
                  "--batch-size=32 --epochs=100 --data=coco128.yaml "
                  "--weights=datasets/weights/yolov5s.pt",
         args=["--nproc_per_node=1", "--local_addr=127.0.0.1", "--nproc_per_node=2", "train.py",
               "--batch-size=32", "--epochs=100", "--data=coco128.yaml",
               "--weights=datasets/weights/yolov5s.pt"],
         adapted="the operator's PET_* for c10d on loopback instead of etcd-v2; the second "
                 "--nproc_per_node given as 2 so that the last one visibly wins",
         env={"PET_NNODES": "1", "PET_RDZV_BACKEND": "c10d",
              "PET_RDZV_ENDPOINT": "127.0.0.1:{port}", "PET_RDZV_ID": "yolo"},
         differs={"MASTER_PORT"}),
    dict(source="oracle-quickstart/oci-hpc-oke docs/running-pytorch-jobs-on-oke-using-"
                "hostnetwork-with-rdma.md (PyTorchJob, c10d)",
         original="export PET_RDZV_CONF=is_host=...; torchrun --local_addr=$POD_NAME "
                  "--nproc_per_node=1 --rdzv-conf=$PET_RDZV_CONF train.py --batch-size=32",
         args=["--local_addr=127.0.0.1", "--nproc_per_node=1", "--rdzv-conf=is_host={is_host}",
               "train.py", "--batch-size=32"],
         adapted="two pods as two nodes here", nodes=2,
         env={"PET_NNODES": "2", "PET_RDZV_BACKEND": "c10d",
              "PET_RDZV_ENDPOINT": "127.0.0.1:{port}", "PET_RDZV_ID": "pytorchjob",
              "PET_RDZV_CONF": "is_host={is_host}"},
         differs={"MASTER_PORT"}),
    dict(source="kubeflow/training-operator examples/pytorch/elastic/echo/echo.yaml",
         original="python -m torch.distributed.run --rdzv_backend=c10d ./echo.py",
         args=["--rdzv_backend=c10d", "./echo.py"],
         adapted="the operator's PET_NNODES, PET_NPROC_PER_NODE and PET_RDZV_ENDPOINT",
         scripts=["echo.py"],
         env={"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2",
              "PET_RDZV_ENDPOINT": "localhost:{port}"},
         differs=ONE_NODE_C10D),
    dict(source="kubeflow/training-operator examples/pytorch/elastic/imagenet/imagenet.yaml",
         original="python -m torch.distributed.run /workspace/examples/imagenet.py "
                  "--arch=resnet18 --epochs=1 --batch-size=32 --workers=0 "
                  "/workspace/data/tiny-imagenet-200",
         args=["{cwd}/examples/imagenet.py", "--arch=resnet18", "--epochs=1", "--batch-size=32",
               "--workers=0", "/workspace/data/tiny-imagenet-200"],
         adapted="the script under the working folder; the operator's PET_* on loopback",
         scripts=["examples/imagenet.py"],
         env={"PET_NNODES": "1:1", "PET_RDZV_BACKEND": "c10d", "PET_NPROC_PER_NODE": "1",
              "PET_RDZV_ENDPOINT": "127.0.0.1:{port}", "PET_MAX_RESTARTS": "100"},
         differs=ONE_NODE_C10D),
    # --- --no-python ----------------------------------------------------------------------------
    dict(source="Dao-AILab/flash-attention tests/losses/test_cross_entropy_parallel.py",
         original="torchrun --no_python --nproc_per_node=8 pytest -q -s "
                  "tests/losses/test_cross_entropy_parallel.py",
         args=["--no_python", "--nproc_per_node=2", "--master_port={port}", "pytest", "-q", "-s",
               "tests/losses/test_cross_entropy_parallel.py"],
         adapted="2 workers, a free port (torch's implicit c10d otherwise)",
         executables=["pytest"], scripts=[]),
    dict(source="pytorch/examples distributed/ddp-tutorial-series/run_multigpu_torchrun.sh",
         original="torchrun --standalone --nproc_per_node=gpu multigpu_torchrun.py 50 10",
         args=["--standalone", "--nproc_per_node=gpu", "multigpu_torchrun.py", "50", "10"],
         adapted="none: without a GPU both launchers refuse it (exit 1)",
         scripts=["multigpu_torchrun.py"]),
    # --- torch.distributed.launch ---------------------------------------------------------------
    dict(source="facebookresearch/deit README_deit.md",
         original="python -m torch.distributed.launch --nproc_per_node=4 --use_env main.py "
                  "--model deit_small_patch16_224 --batch-size 256 --data-path /path/to/imagenet "
                  "--output_dir /path/to/save",
         launcher="launch",
         args=["--nproc_per_node=2", "--use_env", "--master_port={port}", "main.py", "--model",
               "deit_small_patch16_224", "--batch-size", "256", "--data-path",
               "/path/to/imagenet", "--output_dir", "/path/to/save"],
         adapted="2 workers, a free port", scripts=["main.py"]),
    dict(source="huggingface/accelerate README.md (an early version)",
         original="python -m torch.distributed.launch --nproc_per_node 2 "
                  "examples/glue_example.py",
         launcher="launch",
         args=["--nproc_per_node", "2", "--master_port", "{port}", "examples/glue_example.py"],
         adapted="a free port", scripts=["examples/glue_example.py"]),
    dict(source="vtuber-plan/HuBERT-MultiLingual pretrain_multi.sh",
         original="python -m torch.distributed.launch --use_env --nproc_per_node=4 --nnodes=4 "
                  "--node_rank=0 --master_addr=${ip_addr} --master_port=29671 "
                  "$(which fairseq-hydra-train) --config-dir \"hubert/config/pretrain/\" "
                  "--config-name hubert_base_genshin checkpoint.save_dir=${output_dir}",
         launcher="launch",
         args=["--use_env", "--nproc_per_node=1", "--nnodes=2", "--node_rank={node_rank}",
               "--master_addr=127.0.0.1", "--master_port={port}", "{cwd}/fairseq-hydra-train",
               "--config-dir", "hubert/config/pretrain/", "--config-name",
               "hubert_base_genshin", "checkpoint.save_dir=/tmp/out"],
         adapted="2 nodes of 1 worker; the program by its path, as $(which) gives it",
         nodes=2, scripts=["fairseq-hydra-train"]),
    dict(source="zhangruochi/pseudoESM distribute_train.sh",
         original="python -m torch.distributed.launch --nproc_per_node=4 --nnodes=1 "
                  "--node_rank=0 --master_addr=localhost --master_port=22222 train.py",
         launcher="launch",
         args=["--nproc_per_node=2", "--nnodes=1", "--node_rank=0", "--master_addr=localhost",
               "--master_port={port}", "train.py"],
         adapted="2 workers, a free port"),
    dict(source="liuxuexun/LESS scripts/train.sh",
         original="python -m torch.distributed.launch --nproc_per_node 2 --master_port 1111 "
                  "scripts/train.py --batch_size 7 --tag \"\"",
         launcher="launch",
         args=["--nproc_per_node", "2", "--master_port", "{port}", "scripts/train.py",
               "--batch_size", "7", "--tag", ""],
         adapted="a free port", scripts=["scripts/train.py"],
         env={"TORCH_DISTRIBUTED_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1",
              "PYTHONPATH": "./", "OMP_NUM_THREADS": "4"}),
    dict(source="Vchitect/VBench vbench/third_party/amt/scripts/train.sh",
         original="python -m torch.distributed.launch --nproc_per_node $NUM_GPU --master_port "
                  "$PORT train.py -c $CFG",
         launcher="launch",
         args=["--nproc_per_node", "2", "--master_port", "{port}", "train.py", "-c", "cfg.yaml"],
         adapted="NUM_GPU=2, CFG=cfg.yaml"),
    # --- abbreviations, repeats, what torchrun refuses ------------------------------------------
    dict(source="ZetangForward/CrazyCode projects/state-space-model/scripts/MQAR/"
                "tinymamba-k8-4096-256.sh",
         original="torchrun --nnode=1 --nproc_per_node=1 src/train_dev2.py -mn tiny_mamba-k8 -pn "
                  "langchao -en tinymamba-k8-4096-256 -dn MQAR_ywj --node_num 1 --device_num 1 "
                  "--state train",
         args=["--nnode=1", "--nproc_per_node=1", "src/train_dev2.py", "-mn", "tiny_mamba-k8",
               "-pn", "langchao", "-en", "tinymamba-k8-4096-256", "-dn", "MQAR_ywj",
               "--node_num", "1", "--device_num", "1", "--state", "train"],
         scripts=["src/train_dev2.py"], differs=IMPLICIT_C10D),
    dict(source="a public launch script (torchrun --nproc=8; path not confirmed)",
         original="RUN_ID=base ... torchrun --nproc=8 train_submission.py",
         args=["--nproc=8", "train_submission.py"],
         adapted="none: torchrun's argparse refuses the prefix of both spellings (exit 2)",
         scripts=["train_submission.py"]),
    dict(source="issue 42: a Slurm launcher that passes --role twice",
         original="torchrun --role worker ... --role trainer train.py",
         args=["--role", "worker", "--nproc_per_node", "2", "--master_port={port}", "--role",
               "trainer", "train.py"],
         adapted="a free port"),
    dict(source="bankh/DocumentLabeler tools/training_scripts/dist_train_with_params.sh",
         original="python -m torch.distributed.launch --nodes=$1 --node_rank=$2 "
                  "--nproc_per_node=$3 --master_addr=$4 --master_port=$5 \"${@:6}\"",
         launcher="launch",
         args=["--nodes=1", "--node_rank=0", "--nproc_per_node=1", "--master_addr=127.0.0.1",
               "--master_port={port}", "train.py"],
         adapted="none: --nodes is no option's prefix (exit 2)"),
    dict(source="pytorch/examples distributed/ddp-tutorial-series/slurm/sbatch_run.sh",
         original="srun torchrun --nnodes 4 --nproc_per_node 1 --rdzv_id ${job_id} "
                  "--rdzv_backend c10d --rdzv_endpoint $head_node_ip:29500 "
                  "/shared/examples/multinode_torchrun.py 50 10",
         args=["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_id", "777", "--rdzv_backend",
               "c10d", "--rdzv_endpoint", "127.0.0.1:{port}",
               "{cwd}/shared/examples/multinode_torchrun.py", "50", "10"],
         adapted="2 nodes here, job_id=777, the script under the working folder", nodes=2,
         scripts=["shared/examples/multinode_torchrun.py"], differs=MULTI_NODE_C10D),
    dict(source="Luffy03/VoCo Finetune/CC-CCII/train.sh",
         original="torchrun --master_port=25584 main.py --logdir $logdir",
         args=["--master_port={port}", "main.py", "--logdir", "runs"],
         adapted="a free port, logdir=runs", scripts=["main.py"]),
    dict(source="open-compass/VLMEvalKit scripts/run.sh",
         original="torchrun --nproc-per-node=$GPU run.py ${@:1}",
         args=["--nproc-per-node=2", "run.py", "--data", "MMBench", "--model", "idefics_9b"],
         adapted="GPU=2, arguments for ${@:1}", scripts=["run.py"], differs=IMPLICIT_C10D),
    dict(source="072jiajia/Image-Text-Co-Decomposition scripts/train.sh",
         original="CUDA_VISIBLE_DEVICES=0,1,2,3 python -m torch.distributed.run "
                  "--nproc_per_node=auto --master_port 5052 main.py --cfg "
                  "./configs/experiment_configs.yml --method-name image_text_co_decomposition",
         args=["--nproc_per_node=auto", "--master_port", "{port}", "main.py", "--cfg",
               "./configs/experiment_configs.yml", "--method-name",
               "image_text_co_decomposition"],
         adapted="a free port; auto counts the CPUs on a machine without a GPU, as torch does",
         scripts=["main.py"], env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
]
