// Package flagenv fills the flags not given on the command line from the environment, as
// weftd reads it: WEFTD_<NAME>, or FLANNELD_<NAME> for drop-in use. weftd and weftctl (which
// runs beside weftd and must see what it sees) share it.
package flagenv

import (
	"flag"
	"fmt"
	"strings"
)

// Load sets every flag of fs not given on the command line from WEFTD_<NAME> (or, when that
// is unset, FLANNELD_<NAME>), NAME being the flag in upper case with '-' as '_'. lookup is
// os.LookupEnv outside tests.
func Load(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		for _, prefix := range []string{"WEFTD_", "FLANNELD_"} {
			if v, ok := lookup(prefix + name); ok {
				if e := fs.Set(f.Name, v); e != nil {
					err = fmt.Errorf("environment %s%s=%q: %w", prefix, name, v, e)
				}
				return
			}
		}
	})
	return err
}
