// Command provisioner runs Loom's provisioner service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/provisioner"
)

func main() { config.Main("provisioner", provisioner.RunArgs) }
