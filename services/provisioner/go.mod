module github.com/loom-ml/loom/services/provisioner

go 1.26.0

require (
	github.com/loom-ml/loom/libs v0.0.0
	github.com/loom-ml/loom/proto v0.0.0
)

replace (
	github.com/loom-ml/loom/libs => ../../libs
	github.com/loom-ml/loom/proto => ../../proto
)
