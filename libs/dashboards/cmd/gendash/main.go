// Command gendash writes Loom's dashboards, alert rules and Prometheus and
// Grafana configuration, generated from libs/dashboards, to deploy/:
//
//	go run ./libs/dashboards/cmd/gendash            # from the repository root
//	go run ./libs/dashboards/cmd/gendash -deploy DIR
//
// libs/dashboards' TestDeployFilesAreGenerated fails when the committed
// files differ from what this writes.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/loom-ml/loom/libs/dashboards"
)

func main() {
	dir := flag.String("deploy", "deploy", "the deploy directory to write into")
	flag.Parse()
	if err := dashboards.WriteFiles(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gendash:", err)
		os.Exit(1)
	}
}
