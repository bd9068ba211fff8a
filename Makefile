# Loom — common tasks. Everything runs from the repository root (a Go workspace).
PKGS      := github.com/loom-ml/loom/...
SERVICES  := gateway provisioner scheduler health registry training bridge agent
GOTEST    ?= go test
TESTFLAGS ?= -count=1 -timeout 15m

.PHONY: conformance conformance-slurm demo up test vet build proto proto-tools proto-check bench bench-path bench-cluster bench-slurm bench-hpo clean

demo: ## Run the demo on the embedded stack: cluster -> job -> model.
	go run ./cmd/loom demo

up: ## Run the embedded stack in the foreground.
	go run ./cmd/loom up

test: ## Run every test (uses redis-server when installed, miniredis otherwise), then the conformance suite on the Slurm backend.
	$(GOTEST) $(TESTFLAGS) $(PKGS)
	LOOM_CONFORMANCE_BACKEND=slurm $(GOTEST) $(TESTFLAGS) ./cmd/loom/internal/conformance

vet:
	go vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

build: ## Build every service binary and the CLI into bin/.
	@mkdir -p bin
	@for s in $(SERVICES); do go build -o bin/$$s ./services/$$s/cmd/$$s || exit 1; done
	go build -o bin/loom ./cmd/loom

proto-tools: ## Install the protoc plugins (protoc itself: apt-get install protobuf-compiler).
	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.33.0

proto: ## Regenerate the Go code beside the .proto files.
	./proto/gen.sh

proto-check: proto ## Fail when the committed generated code is stale.
	git diff --exit-code -- proto

conformance: ## The Slurm conformance suite: real batch scripts through sbatch/squeue/sacct/scontrol.
	go test -count=1 -v -run . ./cmd/loom/internal/conformance

conformance-slurm: ## The conformance suite on the real-Slurm scheduler backend (root, slurm-wlm, slurmrestd): which tests pass, which skip and why.
	LOOM_CONFORMANCE_BACKEND=slurm go test -count=1 -v -run . ./cmd/loom/internal/conformance

bench: ## Run every benchmark program and write its section of bench/REPORT.md.
	go run ./bench/cmd/pathbench -report bench/REPORT.md
	go run ./bench/cmd/clusterbench -report bench/REPORT.md
	go run ./bench/cmd/slurmbench -report bench/REPORT.md

bench-path: ## The bus path: command -> service -> Redis -> relay -> event.
	go run ./bench/cmd/pathbench -report bench/REPORT.md

bench-cluster: ## A 1,000-node cluster on the sim provider.
	go run ./bench/cmd/clusterbench -report bench/REPORT.md

bench-slurm: ## Loom against a real Slurm on this machine (needs root and slurm-wlm).
	go run ./bench/cmd/slurmbench -report bench/REPORT.md

bench-hpo: ## Loom's hyperparameter search against Optuna (needs python3-optuna), ASHA, Suggest latency.
	go run ./bench/cmd/hpobench -report bench/REPORT.md

clean:
	rm -rf bin
