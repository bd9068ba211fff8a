// Command agent runs Loom's agent service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/agent"
)

func main() { config.Main("agent", agent.RunArgs) }
