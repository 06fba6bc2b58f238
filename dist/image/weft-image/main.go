// Command weft-image builds weft's Linux container image, an OCI image layout, without a
// container engine (package dist/image). `make image` runs it:
//
//	go run ./dist/image/weft-image --version=v0.1.0 --out=.cache/image/weft
//
// The image's timestamps are SOURCE_DATE_EPOCH (seconds since 1970) when it is set, else
// the Unix epoch: the same source gives the same digest. It prints the image index's
// digest, which a registry serves once the layout is pushed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/weftnet/weft/dist/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "weft-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	o := image.Options{ModuleDir: ".", Log: os.Stderr}
	fs := flag.NewFlagSet("weft-image", flag.ContinueOnError)
	out := fs.String("out", ".cache/image/weft", "the OCI image layout to write (a directory, replaced)")
	fs.StringVar(&o.Version, "version", "", "the version to stamp and tag, e.g. v0.1.0 (required)")
	fs.StringVar(&o.Revision, "revision", "", "the source's commit, for the image's labels")
	fs.StringVar(&o.Source, "source", image.DefaultSource, "the source repository, for the image's labels")
	fs.StringVar(&o.ModuleDir, "module", o.ModuleDir, "weft's module directory")
	arches := fs.String("arch", "amd64", "comma-separated architectures (GOARCH) to build, one image each")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Arches = strings.Split(*arches, ",")
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", v, err)
		}
		o.Created = time.Unix(secs, 0)
	}
	res, err := image.Build(ctx, o, *out)
	if err != nil {
		return err
	}
	for _, a := range o.Arches {
		fmt.Fprintf(os.Stderr, "linux/%s: %s\n", a, res.Images[a])
	}
	fmt.Fprintf(os.Stderr, "wrote %s (tag %s)\n", *out, o.Version)
	fmt.Println(res.Digest)
	return nil
}
