//go:build !linux

package main

import (
	"fmt"
	"os"
)

// The demo is made of Linux network namespaces; elsewhere it can only say so.
func main() {
	fmt.Fprintln(os.Stderr, "weft-demo: needs Linux (network namespaces)")
	os.Exit(1)
}
