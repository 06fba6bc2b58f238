package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/e2e/perf"
	"github.com/weftnet/weft/internal/kubetest"
)

func main() {
	if err := run(os.Args, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "weft-bench:", err)
		}
		os.Exit(1)
	}
}

// options is the command line.
type options struct {
	cfg            perf.Config
	only           string
	out            string
	verbose        bool
	noKube         bool
	noThroughput   bool
	onlyThroughput bool
	flanneld       string
}

// intList is a flag holding comma-separated numbers.
type intList struct{ v *[]int }

func (l intList) String() string {
	if l.v == nil {
		return ""
	}
	s := make([]string, len(*l.v))
	for i, n := range *l.v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l intList) Set(s string) error {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	*l.v = out
	return nil
}

func parseFlags(args []string, out io.Writer) (options, error) {
	o := options{cfg: perf.DefaultConfig()}
	quick := false
	for _, a := range args {
		if a == "--quick" || a == "-quick" || a == "--quick=true" || a == "-quick=true" {
			quick = true
		}
	}
	if quick {
		// Before the other flags, which then change the quick run.
		o.cfg = perf.QuickConfig()
	}
	c := &o.cfg
	fs := flag.NewFlagSet("weft-bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Bool("quick", false, "a short run: 1,000 peers, one repetition, 50 events, 1 GiB streams (other flags still apply)")
	fs.StringVar(&c.Weftd, "weftd", "bin/weftd", "the weftd binary")
	fs.StringVar(&o.flanneld, "flanneld", "", "the flanneld binary; default $"+cluster.FlanneldEnv+" or the one tools/flannel builds in .cache/flannel/bin")
	fs.StringVar(&o.only, "only", "", "measure only this daemon: weftd or flanneld")
	fs.Var(intList{&c.Sizes}, "sizes", "numbers of peers for the cold starts (comma-separated; empty: none)")
	fs.Var(intList{&c.EventSizes}, "event-sizes", "numbers of peers for the event latency (empty: none)")
	fs.Var(intList{&c.KubeSizes}, "kube-sizes", "numbers of Node objects for Kubernetes mode (empty: none)")
	fs.BoolVar(&o.noKube, "no-kube", false, "skip Kubernetes mode")
	mib := int(c.ThroughputBytes >> 20)
	fs.IntVar(&mib, "throughput-mib", mib, "MiB of each pod-to-pod TCP stream of the throughput figures (0: none)")
	fs.BoolVar(&o.noThroughput, "no-throughput", false, "skip the throughput figures")
	fs.BoolVar(&o.onlyThroughput, "only-throughput", false, "measure only the throughput figures")
	fs.IntVar(&c.Events, "events", c.Events, "lease puts for the event latency")
	fs.DurationVar(&c.EventInterval, "event-interval", c.EventInterval, "time between the lease puts")
	fs.DurationVar(&c.EventTimeout, "event-timeout", c.EventTimeout, "an event whose route takes longer is a timeout")
	fs.IntVar(&c.Bulk, "bulk", c.Bulk, "leases of the bulk join (0: none)")
	fs.IntVar(&c.BulkBase, "bulk-base", c.BulkBase, "peers before the bulk join")
	fs.IntVar(&c.Reps, "reps", c.Reps, "repetitions of each cold start (the table has the median)")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "time after the last route before the RSS is read")
	fs.DurationVar(&c.StartTimeout, "start-timeout", c.StartTimeout, "limit of a cold start or a bulk join")
	fs.StringVar(&c.Dir, "dir", "", "directory for the clusters' files (daemon logs); default: a temporary one, kept only after a failure")
	fs.StringVar(&o.out, "out", ".cache/bench", "directory for the report (Markdown and JSON); empty: none")
	fs.BoolVar(&o.verbose, "v", false, "log the harness's every step")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch o.only {
	case "":
	case perf.Weftd, perf.Flanneld:
	default:
		return o, fmt.Errorf("--only=%s: want weftd or flanneld", o.only)
	}
	if o.noKube {
		c.KubeSizes = nil
	}
	c.ThroughputBytes = int64(mib) << 20
	switch {
	case o.noThroughput && o.onlyThroughput:
		return o, errors.New("--no-throughput and --only-throughput: want one at most")
	case o.noThroughput:
		c.ThroughputBytes = 0
	case o.onlyThroughput:
		c.Sizes, c.EventSizes, c.KubeSizes, c.Bulk = nil, nil, nil, 0
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args[1:], stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if os.Geteuid() != 0 {
		return errors.New("needs root: the daemons run in network namespaces")
	}
	if err := prepare(&o, log); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := perf.Run(ctx, o.cfg, log)
	if rep == nil {
		return err
	}
	rep.Command = strings.Join(args, " ")
	fmt.Fprintln(stdout)
	if werr := rep.WriteMarkdown(stdout); werr != nil {
		return errors.Join(err, werr)
	}
	if o.out != "" {
		if werr := save(rep, o.out, stdout); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return err
}

// prepare resolves the binaries: weftd as given, flanneld as the e2e tests find it, and drops
// what is missing from the run with a warning.
func prepare(o *options, log *slog.Logger) error {
	c := &o.cfg
	if o.only == perf.Flanneld {
		c.Weftd = ""
	} else {
		abs, err := filepath.Abs(c.Weftd)
		if err != nil {
			return fmt.Errorf("weftd %s: %w", c.Weftd, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("weftd: %w (make bench builds it into bin/weftd-bench)", err)
		}
		c.Weftd = abs
	}
	repo, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	if o.only != perf.Weftd {
		if o.flanneld != "" {
			os.Setenv(cluster.FlanneldEnv, o.flanneld)
		}
		if c.Flanneld, err = cluster.PrepareFlanneld(repo); err != nil {
			return err
		}
		if err := cluster.PrepareFlanneldDeps(repo); err != nil {
			return err
		}
	}
	if len(c.KubeSizes) > 0 {
		if bin, err := kubetest.Binary(); err != nil {
			log.Warn("no kube-apiserver: Kubernetes mode is skipped", "error", err)
			c.KubeSizes = nil
		} else {
			log.Info("Kubernetes mode", "kube-apiserver", bin)
		}
	}
	if c.ThroughputBytes > 0 {
		if c.CNIBin, err = cluster.PrepareCNI(repo); err != nil {
			return err
		}
		if err := cluster.PreparePing(repo); err != nil {
			return err
		}
	}
	log.Info("daemons", "weftd", c.Weftd, "flanneld", c.Flanneld)
	return nil
}

// save writes the report as Markdown and JSON into dir, named after its start time, and as
// latest.md.
func save(rep *perf.Report, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving the report: %w", err)
	}
	base := filepath.Join(dir, "bench-"+rep.Started.Format("20060102-150405"))
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	for path, data := range map[string][]byte{
		base + ".md":                    []byte(md.String()),
		base + ".json":                  append(js, '\n'),
		filepath.Join(dir, "latest.md"): []byte(md.String()),
	} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("saving the report: %w", err)
		}
	}
	fmt.Fprintf(stdout, "report: %s.md, %s.json\n", base, base)
	return nil
}
