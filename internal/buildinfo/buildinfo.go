// Package buildinfo says which version of weft a binary is: the one the release build
// stamped into it (dist/image, `make image`), else the module version the Go toolchain
// recorded, else "(devel)". weftd, weftctl and the weft CNI plugin print it for --version,
// and weftd's weft_build_info metric carries it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// VersionVar is the variable a build stamps the version into, for the linker's -X flag:
//
//	go build -ldflags="-X github.com/weftnet/weft/internal/buildinfo.stamp=v0.1.0" ./cmd/weftd
const VersionVar = "github.com/weftnet/weft/internal/buildinfo.stamp"

// Tags are the build tags of weft's programs as released (`make build`, `make bench`, dist/image,
// the Dockerfile) and as the end-to-end tests build them, for go build's -tags flag.
// grpcnotrace leaves grpc's golang.org/x/net/trace out (and with it /debug/requests, which
// weft never serves): its html/template calls methods by name through reflect, which makes
// the linker keep every exported method of every type that might be reached. Without it
// weftd is 23.8 MB rather than 29.6, and runs in 3.6 MiB less memory at any size, the
// binary's pages being part of its RSS (make bench, 1k and 20k peers).
const Tags = "grpcnotrace"

// stamp is set by the linker only (see VersionVar): nothing assigns it at run time, so it
// is a constant of the binary, not state.
var stamp string

// Version is this binary's version: the stamped one, else the main module's version as the
// Go toolchain recorded it (`go install ...@v0.1.0`), else "(devel)".
func Version() string {
	if stamp != "" {
		return stamp
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// String is what a command prints for --version: its name, the version, the Go release it
// was built with and its platform, e.g. "weftd v0.1.0 go1.26.8 linux/amd64".
func String(command string) string {
	return fmt.Sprintf("%s %s %s %s/%s", command, Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
