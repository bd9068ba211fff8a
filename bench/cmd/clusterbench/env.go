package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
)

// launch is one boot the simulated cloud started: when, and how long until
// the node registers.
type launch struct {
	at      time.Time
	latency time.Duration
}

// env is Loom's one embedded stack (cmd/loom/stack) on the sim provider,
// with what the benchmark learns of the simulated cloud's boots.
type env struct {
	*stack.Stack
	simSettings string

	mu       sync.Mutex
	launches map[string]launch // by node name
}

// startEnv starts the stack with the simulated cloud the options describe.
func startEnv(ctx context.Context, o options) (*env, error) {
	e := &env{launches: map[string]launch{}}
	// Every boot takes the same lognormal latency whatever its capacity
	// type, so that the provider's share of the time is known exactly.
	var lat []string
	for _, t := range []string{"ON_DEMAND", "SPOT", "RESERVATION", "FLEX_START"} {
		lat = append(lat, fmt.Sprintf("%s=%s/%g", t, o.latency, o.sigma))
	}
	e.simSettings = fmt.Sprintf("lognormal latency, median %v, σ %g, every capacity type; heartbeats every %v; no injected failures", o.latency, o.sigma, o.hb)
	// Capacity for exactly what the benchmark asks for, in its zone: ample,
	// and listed per machine type so that the gateway's pre-check sees it.
	var capRules []string
	for _, m := range machines {
		for _, t := range []string{"ON_DEMAND", "SPOT"} {
			capRules = append(capRules, fmt.Sprintf("%s/%s/%s=%d", zone, m, t, 2*o.nodes))
		}
	}
	st, err := stack.Start(ctx, stack.Options{
		Provider: "sim",
		Capacity: strings.Join(capRules, ","),
		LogLevel: o.logLevel,
		ProvisionerArgs: []string{"-sim-seed=1", "-sim-time-scale=1", "-sim-latency=" + strings.Join(lat, ","),
			"-sim-heartbeat-interval=" + o.hb.String()},
		OnSimLaunch: func(node string, latency time.Duration) {
			now := time.Now()
			e.mu.Lock()
			e.launches[node] = launch{at: now, latency: latency}
			e.mu.Unlock()
		},
		Log: slog.Default(),
	})
	if err != nil {
		return nil, err
	}
	e.Stack = st
	return e, nil
}

// failed returns the error of a service that stopped on its own, or nil.
func (e *env) failed() error {
	select {
	case <-e.Done():
		return e.Err()
	default:
		return nil
	}
}

// launchesOf returns the boots of a cluster's nodes.
func (e *env) launchesOf(cluster string) []launch {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []launch
	for name, l := range e.launches {
		if strings.HasPrefix(name, cluster+"/") {
			out = append(out, l)
		}
	}
	return out
}

// close stops the stack and removes its data.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		logf("stopping the stack: %v", err)
	}
}
