// Command weftctl is weft's operator tool: `weftctl leases` lists the leases in the datastore,
// `weftctl status` shows what a node's weftd reports, and `weftctl doctor`, run on a node,
// checks it and says what is wrong and what to do; `weftctl kube-proxy` starts Windows
// kube-proxy on weftd's HNS network. See package ctl.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/weftnet/weft/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := ctl.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
