// Command bridge runs Loom's bridge service (Pub/Sub and Kafka ingress, the
// public events' egress) against an existing Kafka, Redis and gateway.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/bridge"
)

func main() { config.Main("bridge", bridge.RunArgs) }
