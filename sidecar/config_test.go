package sidecar

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/sidecar/auth"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		addr     string
		token    bool
		accepted bool
	}{
		{"127.0.0.1:7411", false, true},
		{"127.1.2.3:0", false, true},
		{"[::1]:7411", false, true},
		{"localhost:7411", false, true},
		{"LocalHost:7411", false, true},
		{":7411", false, false}, // every interface
		{"0.0.0.0:7411", false, false},
		{"[::]:7411", false, false},
		{"10.0.0.5:7411", false, false},
		{"example.internal:7411", false, false},
		{":7411", true, true},
		{"0.0.0.0:7411", true, true},
		{"10.0.0.5:7411", true, true},
		{"127.0.0.1", false, false}, // no port
		{"127.0.0.1", true, false},
	}
	for _, c := range cases {
		err := CheckListen(c.addr, c.token)
		if (err == nil) != c.accepted {
			t.Errorf("CheckListen(%q, token=%v) = %v, want accepted=%v", c.addr, c.token, err, c.accepted)
		}
	}
	err := CheckListen("0.0.0.0:7411", false)
	if err == nil || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("refusal does not say what to do: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	c := DefaultConfig()
	c.LogFormat = "xml"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "log-format") {
		t.Errorf("log format xml: %v", err)
	}
	for d, ok := range map[time.Duration]bool{0: true, time.Second: true, 10 * time.Minute: true, -time.Second: false, 500 * time.Millisecond: false} {
		c = DefaultConfig()
		c.PruneInterval = d
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "--prune-interval")) {
			t.Errorf("prune interval %s: %v, want accepted=%v (a refusal names --prune-interval)", d, err, ok)
		}
	}
	for d, ok := range map[time.Duration]bool{0: true, MinWatchPoll: true, 100 * time.Millisecond: true, MaxWatchPoll: true,
		time.Millisecond: false, 2 * time.Second: false, -time.Second: false} {
		c = DefaultConfig()
		c.WatchPoll = d
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "--watch-poll")) {
			t.Errorf("watch poll %s: %v, want accepted=%v (a refusal names --watch-poll)", d, err, ok)
		}
	}
	// --watch-store is ignored, whatever it says, so that command lines
	// that still give it start.
	for _, w := range []struct{ store, watch string }{
		{"postgres://u@bouncer:6432/l", "postgres://u@db-direct:5432/l"},
		{"sqlite:./l.db", "postgres://u@db:5432/l"},
		{"postgres://u@db:5432/l", "sqlite:./l.db"},
	} {
		c = DefaultConfig()
		c.Store, c.WatchStore = w.store, w.watch
		if err := c.Validate(); err != nil {
			t.Errorf("store %s, watch store %q: %v, want accepted (the flag is ignored)", w.store, w.watch, err)
		}
	}
	c = DefaultConfig()
	c.Listen = ":7411"
	if err := c.Validate(); err == nil {
		t.Error("all interfaces without a token file accepted")
	}
	c.TokenFile = "/some/file"
	if err := c.Validate(); err != nil {
		t.Errorf("all interfaces with a token file: %v", err)
	}

	// The probe listener may listen anywhere without a token; it is TCP.
	for addr, ok := range map[string]bool{"": true, "0.0.0.0:7412": true, ":7412": true, "10.0.0.5:7412": true, "[::]:0": true,
		"0.0.0.0": false, "unix:/run/leasehold/probe.sock": false, "7412": false} {
		c = DefaultConfig()
		c.ProbeListen = addr
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "--probe-listen")) {
			t.Errorf("--probe-listen %q: %v, want accepted=%v (a refusal names --probe-listen)", addr, err, ok)
		}
	}
}

// TestServeFlagsFromEnv: every serve flag is read from its variable, and
// the command line wins.
func TestServeFlagsFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"LEASEHOLD_LISTEN":           "127.0.0.1:9999",
		"LEASEHOLD_STORE":            "sqlite:/from/env.db",
		"LEASEHOLD_TOKEN_FILE":       "/env/token",
		"LEASEHOLD_TOKEN":            "not-the-bearer-token",
		"LEASEHOLD_REQUIRE_DECLARED": "true",
		"LEASEHOLD_PRUNE_INTERVAL":   "30m",
		"LEASEHOLD_ALLOW_HOST":       "leasehold.default.svc, *.svc.cluster.local",
		"LEASEHOLD_WATCH_POLL":       "250ms",
		"LEASEHOLD_PROBE_LISTEN":     "0.0.0.0:7412",
	}
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--store", "sqlite:/from/flag.db"}); err != nil {
		t.Fatal(err)
	}
	if err := cli.ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	want := Config{Listen: "127.0.0.1:9999", Store: "sqlite:/from/flag.db", TokenFile: "/env/token", LogFormat: "text",
		RequireDeclared: true, PruneInterval: 30 * time.Minute, AllowHosts: []string{"leasehold.default.svc", "*.svc.cluster.local"},
		WatchPoll: 250 * time.Millisecond, ProbeListen: "0.0.0.0:7412", TokenGrace: auth.DefaultGrace}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("config %+v, want %+v (flag wins over env, env over default)", cfg, want)
	}
}
