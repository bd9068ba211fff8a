package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/services/gateway"
	"github.com/loom-ml/loom/services/provisioner"
)

// launch is one boot the simulated cloud started: when, and how long until
// the node registers.
type launch struct {
	at      time.Time
	latency time.Duration
}

// stack is the part of Loom the benchmark needs, in this process.
type stack struct {
	dir                    string
	broker                 *embedded.Broker
	redis                  *embedded.Redis
	gatewayAddr, provAddr  string
	gatewayHTTP, provHTTP  string
	cancel                 context.CancelFunc
	done                   chan error
	wg                     sync.WaitGroup
	mu                     sync.Mutex
	launches               map[string]launch // by node name
	redisKind, simSettings string
}

func freeAddr() (string, error) {
	p, err := embedded.FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

// parse fills a service's config from its flags: documented defaults, then args.
func parse(register func(*flag.FlagSet), args ...string) error {
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	register(fs)
	return fs.Parse(args)
}

func startStack(ctx context.Context, o options) (*stack, error) {
	dir, err := os.MkdirTemp("", "clusterbench-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, done: make(chan error, 2), launches: map[string]launch{}}
	if s.broker, err = embedded.StartBroker(ctx, "", filepath.Join(dir, "broker")); err != nil {
		s.close()
		return nil, err
	}
	if s.redis, err = embedded.StartRedis(ctx, "", filepath.Join(dir, "redis")); err != nil {
		s.close()
		return nil, err
	}
	s.redisKind = s.redis.Kind
	brokers := []string{s.broker.Addr}
	if err := bus.EnsureTopics(ctx, brokers, topics.All()); err != nil {
		s.close()
		return nil, fmt.Errorf("create topics: %w", err)
	}
	addrs := make([]string, 6)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			s.close()
			return nil, err
		}
	}
	s.provAddr, s.provHTTP, s.gatewayAddr, s.gatewayHTTP = addrs[0], addrs[1], addrs[2], addrs[3]
	common := func(grpcAddr, httpAddr string) config.Common {
		return config.Common{Brokers: brokers, RedisAddr: s.redis.Addr, GRPCAddr: grpcAddr, HTTPAddr: httpAddr,
			LogLevel: o.logLevel, CreateTopics: false}
	}

	// Every boot takes the same lognormal latency whatever its capacity
	// type, so that the provider's share of the time is known exactly.
	var lat string
	for i, t := range []string{"ON_DEMAND", "SPOT", "RESERVATION", "FLEX_START"} {
		if i > 0 {
			lat += ","
		}
		lat += fmt.Sprintf("%s=%s/%g", t, o.latency, o.sigma)
	}
	s.simSettings = fmt.Sprintf("lognormal latency, median %v, σ %g, every capacity type; heartbeats every %v; no injected failures", o.latency, o.sigma, o.hb)
	// Capacity for exactly what the benchmark asks for, in its zone: ample,
	// and listed per machine type so that the gateway's pre-check sees it.
	var capRules []string
	for _, m := range machines {
		for _, t := range []string{"ON_DEMAND", "SPOT"} {
			capRules = append(capRules, fmt.Sprintf("%s/%s/%s=%d", zone, m, t, 2*o.nodes))
		}
	}
	var pc provisioner.Config
	if err := parse(pc.RegisterFlags, "-provider=sim", "-sim-seed=1", "-sim-time-scale=1",
		"-sim-latency="+lat, "-sim-heartbeat-interval="+o.hb.String(), "-capacity="+strings.Join(capRules, ",")); err != nil {
		s.close()
		return nil, fmt.Errorf("provisioner flags: %w", err)
	}
	pc.Common = common(s.provAddr, s.provHTTP)
	pc.DataDir = filepath.Join(dir, "provisioner")
	pc.Sim.OnLaunch = func(node string, latency time.Duration) {
		now := time.Now()
		s.mu.Lock()
		s.launches[node] = launch{at: now, latency: latency}
		s.mu.Unlock()
	}

	var gc gateway.Config
	if err := parse(gc.RegisterFlags); err != nil {
		s.close()
		return nil, fmt.Errorf("gateway flags: %w", err)
	}
	gc.Common = common(s.gatewayAddr, s.gatewayHTTP)
	gc.RESTAddr, gc.ProvisionerAddr = addrs[4], s.provAddr
	// No scheduler or registry runs: nothing here reads jobs or models.
	gc.SchedulerAddr, gc.RegistryAddr = addrs[5], addrs[5]

	svcCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	services := map[string]func(context.Context) error{
		"provisioner": func(ctx context.Context) error { return provisioner.Run(ctx, pc) },
	}
	ready := []string{s.provHTTP}
	if o.via == "gateway" {
		services["gateway"] = func(ctx context.Context) error { return gateway.Run(ctx, gc) }
		ready = append(ready, s.gatewayHTTP)
	}
	for name, run := range services {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := run(svcCtx); err != nil && svcCtx.Err() == nil {
				s.done <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if err := s.waitReady(ctx, 60*time.Second, ready...); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// waitReady polls each service's /readyz.
func (s *stack) waitReady(ctx context.Context, timeout time.Duration, httpAddrs ...string) error {
	deadline := time.Now().Add(timeout)
	for _, a := range httpAddrs {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/readyz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if err := s.failed(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("service at %s not ready after %v", a, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// failed returns a service's error once one stopped.
func (s *stack) failed() error {
	select {
	case err := <-s.done:
		s.done <- err
		return err
	default:
		return nil
	}
}

// launchesOf returns the boots of a cluster's nodes.
func (s *stack) launchesOf(cluster string) []launch {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []launch
	for name, l := range s.launches {
		if len(name) > len(cluster) && name[:len(cluster)+1] == cluster+"/" {
			out = append(out, l)
		}
	}
	return out
}

func (s *stack) close() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	var errs []error
	if s.redis != nil {
		errs = append(errs, s.redis.Close())
	}
	if s.broker != nil {
		errs = append(errs, s.broker.Close())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench: stopping the stack:", err)
	}
	_ = os.RemoveAll(s.dir)
}
