// Command scheduler runs Loom's scheduler service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/scheduler"
)

func main() { config.Main("scheduler", scheduler.RunArgs) }
