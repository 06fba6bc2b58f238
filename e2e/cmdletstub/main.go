// Command cmdletstub stands in for powershell.exe on the Wine node of the e2e tests, whose
// Wine has no PowerShell (its powershell.exe runs nothing and exits 0, so a caller would
// take every cmdlet for done). Built for Windows as powershell.exe and put first on the
// Wine node's PATH, it records the command it was asked to run, one JSON array of its
// arguments a line, in the file $WEFT_CMDLET_LOG, and refuses it: it prints why and exits
// with status 1, as PowerShell does for a command that fails under
// $ErrorActionPreference="Stop". A test then knows exactly which cmdlet a program ran
// first, with which arguments, and that the program stopped there.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	if err := record(os.Getenv("WEFT_CMDLET_LOG"), os.Args[1:]); err != nil {
		fmt.Println("cmdletstub:", err)
		os.Exit(2)
	}
	fmt.Println("cmdletstub: not run: this node has no PowerShell")
	os.Exit(1)
}

// record appends args to the log at path.
func record(path string, args []string) error {
	if path == "" {
		return fmt.Errorf("WEFT_CMDLET_LOG is not set")
	}
	line, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("recording %q: %w", args, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("recording %q: %w", args, err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("recording %q in %s: %w", args, path, err)
	}
	return f.Close()
}
