// Package ctl is weftctl, the operator's tool: it lists the leases in the datastore, shows
// what a node's weftd reports about itself, and checks a node's kernel state, subnet.env and
// weftd against the leases (doctor), saying what is wrong and what to do; on Windows it
// starts kube-proxy with the HNS network and source VIP weftd chose (kube-proxy). Output is
// a table for people, or JSON (-o json) for programs.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/internal/buildinfo"
	"github.com/weftnet/weft/internal/flagenv"
)

// Exit statuses of Main.
const (
	ExitOK       = 0
	ExitProblems = 1 // an error, or doctor found a problem
	ExitUsage    = 2
)

// errProblems makes the exit status non-zero without another message: the output said it.
var errProblems = errors.New("problems found")

const usage = `weftctl: look at a weft cluster and its nodes.

Usage:
  weftctl leases [flags]   the leases in the datastore
  weftctl status [flags]   what a node's weftd reports (/status)
  weftctl doctor [flags]   check this node (run it on the node, as root)
  weftctl kube-proxy [flags] -- KUBE-PROXY [ARG...]
                           run Windows kube-proxy on weftd's HNS network, with its source VIP
  weftctl version          weftctl's version

leases, status and doctor take -o table (the default) or -o json; every command takes -h for
its flags.
Flags that weftd also has (--etcd-*, --kube-subnet-mgr and Kubernetes mode's, --iface and the
others of the interface's choice, --subnet-file, ...) are weftd's own, with its defaults, and
can be set from the environment as weftd's are, WEFTD_<FLAG> or FLANNELD_<FLAG>, so that
weftctl run beside weftd sees what it sees.
`

// Main runs weftctl with args (the program name left out) and returns its exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	var run func(ctx context.Context, args []string, out io.Writer) error
	switch args[0] {
	case "leases":
		run = runLeases
	case "status":
		run = runStatus
	case "doctor":
		run = runDoctor
	case "kube-proxy":
		run = runKubeProxy
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.String("weftctl"))
		return ExitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "weftctl: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
	err := run(ctx, args[1:], stdout)
	var ue usageError
	var status exitStatus
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &status):
		return int(status) // the program weftctl ran said why
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errProblems):
		return ExitProblems
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "weftctl %s: %v\n", args[0], err)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "weftctl %s: %v\n", args[0], err)
		return ExitProblems
	}
}

// usageError is a bad command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// common are the flags every command has.
type common struct {
	output  string
	timeout time.Duration
	// weftd names the flags of the command that are weftd's (addWeftdFlags): only those are
	// read from weftd's environment variables (WEFTD_O would mean nothing to anyone).
	weftd []string
}

// addWeftdFlags registers on fs weftd's own flags of the given names (daemon.Config's, with
// weftd's usage and defaults), writing into cfg.
func (c *common) addWeftdFlags(fs *flag.FlagSet, cfg *daemon.Config, names ...string) {
	all := flag.NewFlagSet("weftd", flag.ContinueOnError)
	cfg.AddFlags(all)
	for _, name := range names {
		f := all.Lookup(name)
		if f == nil {
			panic("weftctl: weftd has no flag --" + name) // a mistake in weftctl, which every test of the command finds
		}
		fs.Var(f.Value, f.Name, f.Usage)
		c.weftd = append(c.weftd, name)
	}
}

func (c *common) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.output, "o", "table", "output format: table or json")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long the command may take")
}

func (c *common) validate() error {
	if c.output != "table" && c.output != "json" {
		return fmt.Errorf("-o=%q: want table or json", c.output)
	}
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout=%v: must be positive", c.timeout)
	}
	return nil
}

// parse parses a command's flags, then fills weftd's flags not given from the environment.
// Its errors are usage errors; -h prints the flags to out and returns flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string, out io.Writer, c *common) error {
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if err := flagenv.Load(onlyWeftdFlags(fs, c.weftd), os.LookupEnv); err != nil {
		return usageError{err}
	}
	if err := c.validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// onlyWeftdFlags is the part of fs named in weftd (the flags weftd has too) that the
// command line did not give: those are read from the environment.
func onlyWeftdFlags(fs *flag.FlagSet, weftd []string) *flag.FlagSet {
	sub := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range weftd {
		if f := fs.Lookup(name); !given[name] {
			sub.Var(f.Value, f.Name, f.Usage)
		}
	}
	return sub
}
