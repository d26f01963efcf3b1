// Package demo runs the serving daemon in front of a simulated Dynamo
// fleet, in one process: `serve --demo`, `top --demo` and `bench` start
// it. It is the only place where the simulator and the daemon meet; the
// daemon itself never imports the simulator.
//
// Imports: config, fleetsim, routerd.
package demo

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/routerd"
)

// DefaultBind is where the demo router listens when Options names no
// address.
const DefaultBind = "127.0.0.1:8080"

// AdminToken is the demo configuration's admin token.
const AdminToken = fleetsim.DemoAdminToken

// Options shape a demo.
type Options struct {
	// Fleet shapes the simulated fleet; two prefill and two decode workers
	// at speed 4 when it has neither decode nor aggregated workers.
	Fleet fleetsim.Options
	// Bind is the router's listen address; DefaultBind when "".
	Bind string
	// Deps are the daemon's logger, metrics, picker and grace.
	Deps routerd.Deps
}

// Demo is a simulated fleet and the daemon routing to it.
type Demo struct {
	Fleet  *fleetsim.Demo
	Daemon *routerd.Daemon
	// Config is the daemon's configuration (the fleet's demo config).
	Config *config.Config
}

// Start starts the simulated fleet and builds the daemon over the
// configuration the fleet renders for it; the daemon listens but does not
// serve until Run, which must follow.
func Start(o Options) (*Demo, error) {
	bind := o.Bind
	if bind == "" {
		bind = DefaultBind
	}
	fo := o.Fleet
	if fo.Decode == 0 && fo.Aggregated == 0 {
		fo = fleetsim.Options{Prefill: 2, Decode: 2, Speed: 4}
	}
	fl, err := fleetsim.StartDemo(fo, bind)
	if err != nil {
		return nil, fmt.Errorf("demo fleet: %w", err)
	}
	doc, err := config.Parse("(demo)", []byte(fl.Config), config.Options{})
	if err == nil && doc.Findings.Errors() > 0 {
		err = fmt.Errorf("the demo configuration has %s: %v", doc.Findings.ErrorCount(), doc.Findings)
	}
	if err != nil {
		fl.Stop()
		return nil, err
	}
	d, err := routerd.New(doc.Config, o.Deps)
	if err != nil {
		fl.Stop()
		return nil, err
	}
	return &Demo{Fleet: fl, Daemon: d, Config: doc.Config}, nil
}

// Run serves until ctx ends, then stops the daemon and the fleet.
func (d *Demo) Run(ctx context.Context) error {
	defer d.Fleet.Stop()
	return d.Daemon.Run(ctx)
}

// Addr is the router's address.
func (d *Demo) Addr() string { return d.Daemon.Addr() }

// Banner writes what the demo is and commands to try against it.
func (d *Demo) Banner(w io.Writer) {
	sim := d.Fleet.Sim
	model := sim.Model()
	count := map[string]int{}
	for _, wk := range sim.Workers() {
		count[wk.Role]++
	}
	addr := d.Addr()
	root := d.Fleet.Root
	routing := "requests are pinned by load"
	if d.Config.Dynamo.KV.Enabled {
		routing = "prefill workers are chosen by how much of the prompt their KV cache holds (dynamo.kv)"
	}
	fmt.Fprintf(w, `Continuum is routing to a simulated Dynamo fleet: %d prefill, %d decode and %d aggregated workers
serving %s in namespace(s) %s, registered in Dynamo's file store at %s
and publishing their load and KV-cache events over ZMQ; %s.

Try it:
  curl -s http://%s/v1/chat/completions -H 'Content-Type: application/json' -H 'x-backend: 1' -i \
    -d '{"model":"%s","messages":[{"role":"user","content":"Hello!"}]}'
  curl -sN http://%s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%s","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'
  curl -s http://%s/v1/messages -H 'Content-Type: application/json' -H 'anthropic-version: 2023-06-01' \
    -d '{"model":"%s","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Hello!"}]}'
  curl -s http://%s/v1/responses -H 'Content-Type: application/json' \
    -d '{"model":"%s","instructions":"Be brief.","input":"Hello!"}'
  curl -s -H 'Authorization: Bearer %s' http://%s/admin/dynamo/workers
  continuum top --router http://%s --token %s
  continuum discover --source file --file-root %s
  continuum tail-load --source file --file-root %s

Press Ctrl-C to stop.
`, count["prefill"], count["decode"], count["backend"], strings.Join(sim.Models(), ", "), strings.Join(sim.Namespaces(), ", "),
		root, routing, addr, model, addr, model, addr, model, addr, model, AdminToken, addr, addr, AdminToken, root, root)
}
