package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/weftnet/weft/daemon"
)

func parse(t *testing.T, args ...string) (*flag.FlagSet, *logFlags, error) {
	t.Helper()
	cfg := daemon.DefaultConfig()
	var pf planeFlags
	var lf logFlags
	fs := newFlagSet(&cfg, &pf, &lf)
	fs.SetOutput(io.Discard)
	return fs, &lf, fs.Parse(args)
}

func TestVerbosityIsTheLogLevel(t *testing.T) {
	for _, c := range []struct {
		args []string
		want slog.Level
	}{
		{nil, slog.LevelInfo},
		{[]string{"-v=0"}, slog.LevelInfo},
		{[]string{"-v=1"}, slog.LevelInfo},
		{[]string{"-v=2"}, slog.LevelDebug},
		{[]string{"-v", "10"}, slog.LevelDebug},
		{[]string{"-v=4", "--log-level=warn"}, slog.LevelWarn},
		{[]string{"--log-level=error", "-v=4"}, slog.LevelError},
	} {
		fs, lf, err := parse(t, c.args...)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if got, err := lf.level(fs); err != nil || got != c.want {
			t.Errorf("%q: level %v (%v), want %v", c.args, got, err, c.want)
		}
	}
}

func TestKlogFlagsRefusedAsKlogRefusesThem(t *testing.T) {
	for _, ok := range [][]string{
		{"-vmodule=main=2,backend*=4"}, {"-vmodule="}, {"-vmodule=a=1,"}, {"-log_backtrace_at=main.go:120"},
		{"-log_backtrace_at="}, {"-v=-1"}, {"--iptables-resync=10"},
	} {
		if _, _, err := parse(t, ok...); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range [][]string{
		{"-vmodule=main"}, {"-vmodule=main=x"}, {"-vmodule=main=-1"}, {"-vmodule==2"}, {"-log_backtrace_at=main:1"},
		{"-log_backtrace_at=main.go:0"}, {"-log_backtrace_at=main.go"}, {"-v=two"}, {"--iptables-resync=often"},
	} {
		if _, _, err := parse(t, bad...); err == nil {
			t.Errorf("%q accepted; flanneld refuses it", bad)
		}
	}
}

func TestIgnoredFlagsLoggedOnceWithWhy(t *testing.T) {
	fs, _, err := parse(t, "--iptables-resync=10", "-vmodule=main=3", "--ip-masq")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logIgnored(fs, slog.New(slog.NewTextHandler(&buf, nil)))
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d lines, want one per ignored flag given:\n%s", n, out)
	}
	for _, want := range []string{`flag=--iptables-resync value=10 why="weftd keeps no iptables`, `flag=--vmodule value="main=3" why=`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for name := range ignoredFlags() {
		if fs.Lookup(name) == nil {
			t.Errorf("-%s is said to be ignored but is no flag", name)
		}
	}
}
