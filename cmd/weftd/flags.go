package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// logFlags are weftd's log flags and the three of klog's that flanneld takes (-v, -vmodule,
// -log_backtrace_at), so that a flanneld command line starts weftd unchanged.
type logFlags struct {
	levelName string // --log-level
	file      string // --log-file
	// verbosity is klog's -v as flanneld reads it: flannel logs its routine messages at V(0)
	// and V(1) (a VXLAN device found and kept), and the detail of its work at V(2) and above
	// (node lookups, rule clean-ups; V(4) each FDB write, V(6) each iptables-restore), which
	// is what weft logs at debug.
	verbosity int
	// vmodule and backtraceAt are kept only to be named in the log as ignored.
	vmodule, backtraceAt string
}

func (lf *logFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&lf.levelName, "log-level", "info", "log level: debug, info, warn or error (over -v when both are given)")
	fs.StringVar(&lf.file, "log-file", "", "append the log to this file instead of stderr (a Windows service has no stderr)")
	fs.Func("v", "flanneld's (klog's) log verbosity: 0 and 1 are --log-level=info, 2 and above --log-level=debug", func(s string) error {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return fmt.Errorf("not a number: %q", s)
		}
		lf.verbosity = int(v)
		return nil
	})
	fs.Var(checkedString{&lf.vmodule, checkVmodule}, "vmodule", "flanneld's (klog's) per-file verbosity, pattern=N,...: accepted and ignored (weft's log has one level)")
	fs.Var(checkedString{&lf.backtraceAt, checkTraceLocation}, "log_backtrace_at", "flanneld's (klog's) file:N whose log line emits a stack trace: accepted and ignored (no line of weft's source is flannel's)")
}

// level is the log level: --log-level when given (on the command line or in the
// environment), else the one -v maps to.
func (lf *logFlags) level(fs *flag.FlagSet) (slog.Level, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["log-level"] && given["v"] {
		if lf.verbosity >= 2 {
			return slog.LevelDebug, nil
		}
		return slog.LevelInfo, nil
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(lf.levelName)); err != nil {
		return 0, fmt.Errorf("--log-level=%q: %w", lf.levelName, err)
	}
	return lvl, nil
}

// checkVmodule refuses what klog refuses in -vmodule: each comma-separated item must be
// pattern=N, N a non-negative number, so that a command line flanneld would not start with
// does not start weftd either.
func checkVmodule(s string) error {
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			continue
		}
		pat, n, ok := strings.Cut(item, "=")
		if !ok || pat == "" || strings.Contains(n, "=") {
			return fmt.Errorf("%q: not pattern=N", item)
		}
		if v, err := strconv.ParseInt(n, 10, 32); err != nil || v < 0 {
			return fmt.Errorf("%q: level not a non-negative number", item)
		}
	}
	return nil
}

// checkTraceLocation refuses what klog refuses in -log_backtrace_at: it is empty or
// file.go:N with N positive.
func checkTraceLocation(s string) error {
	if s == "" {
		return nil
	}
	file, line, ok := strings.Cut(s, ":")
	if !ok || !strings.Contains(file, ".") || strings.Contains(line, ":") {
		return fmt.Errorf("%q: not file.go:N", s)
	}
	if n, err := strconv.Atoi(line); err != nil || n <= 0 {
		return fmt.Errorf("%q: line not a positive number", s)
	}
	return nil
}

// ignoredFlags are flanneld's flags that mean nothing to weftd, with why: weftd takes them,
// so that a flanneld command line starts it unchanged, and says once that it ignores them.
func ignoredFlags() map[string]string {
	return map[string]string{
		"iptables-resync": "weftd keeps no iptables rules to re-apply on a timer: its nftables rules are checked on every full reconciliation (--resync-interval), " +
			"and its routes, neighbours and FDB entries are repaired as soon as the kernel reports them changed",
		"vmodule":          "weft's log has one level for all of it (--log-level, or -v)",
		"log_backtrace_at": "weftd logs no stack traces at a source line: none of its lines are flannel's",
	}
}

// addIgnoredFlags registers the ignored flags that no other part of weftd registers, with
// flanneld's types, so that they parse as flanneld parses them.
func addIgnoredFlags(fs *flag.FlagSet) {
	fs.Int("iptables-resync", 5, "flanneld's period of its iptables re-check, in seconds: accepted and ignored (weftd repairs drift as it happens)")
}

// checkedString is a string flag whose value check approves.
type checkedString struct {
	p     *string
	check func(string) error
}

func (c checkedString) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c checkedString) Set(s string) error {
	if err := c.check(s); err != nil {
		return err
	}
	*c.p = s
	return nil
}

// logIgnored says once which of the given flags (command line or environment) weftd ignores,
// and why.
func logIgnored(fs *flag.FlagSet, log *slog.Logger) {
	why := ignoredFlags()
	fs.Visit(func(f *flag.Flag) {
		if reason, ok := why[f.Name]; ok {
			log.Info("ignoring flanneld's flag", "flag", "--"+f.Name, "value", f.Value.String(), "why", reason)
		}
	})
}
