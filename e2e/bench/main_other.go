//go:build !linux

package main

import (
	"fmt"
	"os"
)

// The benchmark runs daemons in Linux network namespaces; elsewhere it can only say so.
func main() {
	fmt.Fprintln(os.Stderr, "weft-bench: needs Linux (network namespaces)")
	os.Exit(1)
}
