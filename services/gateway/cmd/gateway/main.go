// Command gateway runs Loom's gateway service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/gateway"
)

func main() { config.Main("gateway", gateway.RunArgs) }
