// Command health runs Loom's health service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/health"
)

func main() { config.Main("health", health.RunArgs) }
