module github.com/loom-ml/loom/bench

go 1.26.0

require (
	github.com/loom-ml/loom/libs v0.0.0
	github.com/loom-ml/loom/proto v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/loom-ml/loom/libs => ../libs
	github.com/loom-ml/loom/proto => ../proto
)
