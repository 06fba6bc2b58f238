//go:build !windows

package main

import "context"

// runAsService is for Windows' service control manager; elsewhere weftd runs under a
// service manager of its own (systemd) as a plain process.
func runAsService(func(ctx context.Context) error) (handled bool, err error) { return false, nil }
