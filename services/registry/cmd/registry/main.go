// Command registry runs Loom's registry service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/registry"
)

func main() { config.Main("registry", registry.RunArgs) }
