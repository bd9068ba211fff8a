// Command provisioner runs Loom's provisioner service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/services/provisioner"
)

func main() {
	var cfg provisioner.Config
	fs := flag.NewFlagSet("provisioner", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := provisioner.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "provisioner:", err)
		os.Exit(1)
	}
}
