// Command training runs Loom's training service against an existing Kafka
// and Redis. Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/training"
)

func main() { config.Main("training", training.RunArgs) }
