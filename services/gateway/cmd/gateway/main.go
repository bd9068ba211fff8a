// Command gateway runs Loom's gateway service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/services/gateway"
)

func main() {
	var cfg gateway.Config
	fs := flag.NewFlagSet("gateway", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := gateway.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
