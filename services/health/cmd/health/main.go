// Command health runs Loom's health service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/services/health"
)

func main() {
	var cfg health.Config
	fs := flag.NewFlagSet("health", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := health.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "health:", err)
		os.Exit(1)
	}
}
