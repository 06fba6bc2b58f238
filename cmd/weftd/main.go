// Command weftd is weft's node daemon: it leases the node's pod subnet, writes subnet.env for
// the CNI plugin and keeps every other node's pods reachable. Its flags are flanneld's; each
// may also be given as WEFTD_<FLAG> (or FLANNELD_<FLAG>) in the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/internal/buildinfo"
	"github.com/weftnet/weft/internal/flagenv"
	"github.com/weftnet/weft/wgkey"
)

func main() {
	args := os.Args[1:]
	handled, err := runAsService(func(ctx context.Context) error { return run(ctx, args) })
	if !handled {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err = run(ctx, args)
		stop()
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "weftd:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	cfg := daemon.DefaultConfig()
	var pf planeFlags
	var lf logFlags
	fs := newFlagSet(&cfg, &pf, &lf)
	version := fs.Bool("version", false, "print weftd's version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Only from the command line, as flanneld's: read before the environment, where a
	// WEFTD_VERSION would otherwise stop every start.
	if *version {
		fmt.Println(buildinfo.String("weftd"))
		return nil
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := flagenv.Load(fs, os.LookupEnv); err != nil {
		return err
	}
	cfg.NotifySocket = os.Getenv("NOTIFY_SOCKET")
	cfg.WireGuardKeyFile = wgkey.Path(os.LookupEnv)
	cfg.NodeName = os.Getenv("NODE_NAME")
	lvl, err := lf.level(fs)
	if err != nil {
		return err
	}
	out := os.Stderr
	if lf.file != "" {
		f, err := os.OpenFile(lf.file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--log-file=%q: %w", lf.file, err)
		}
		defer f.Close()
		out = f
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: lvl}))
	logIgnored(fs, log)

	return daemon.Run(ctx, cfg, log, pf.platform(cfg))
}

// newFlagSet is weftd's command line but --version: the daemon's flags, the data plane's of
// this OS, the log's, and flanneld's that mean nothing to weft.
func newFlagSet(cfg *daemon.Config, pf *planeFlags, lf *logFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("weftd", flag.ContinueOnError)
	cfg.AddFlags(fs)
	pf.addFlags(fs)
	lf.addFlags(fs)
	addIgnoredFlags(fs)
	return fs
}
