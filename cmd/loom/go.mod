module github.com/loom-ml/loom/cmd/loom

go 1.26.0

require (
	github.com/loom-ml/loom/libs v0.0.0
	github.com/loom-ml/loom/proto v0.0.0
	github.com/loom-ml/loom/services/agent v0.0.0
	github.com/loom-ml/loom/services/gateway v0.0.0
	github.com/loom-ml/loom/services/health v0.0.0
	github.com/loom-ml/loom/services/provisioner v0.0.0
	github.com/loom-ml/loom/services/registry v0.0.0
	github.com/loom-ml/loom/services/scheduler v0.0.0
)

replace (
	github.com/loom-ml/loom/libs => ../../libs
	github.com/loom-ml/loom/proto => ../../proto
	github.com/loom-ml/loom/services/agent => ../../services/agent
	github.com/loom-ml/loom/services/gateway => ../../services/gateway
	github.com/loom-ml/loom/services/health => ../../services/health
	github.com/loom-ml/loom/services/provisioner => ../../services/provisioner
	github.com/loom-ml/loom/services/registry => ../../services/registry
	github.com/loom-ml/loom/services/scheduler => ../../services/scheduler
)
