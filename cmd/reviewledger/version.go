package main

import (
	"fmt"
	"io"
	"runtime"
)

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version set at build time and the Go version.
func (VersionCmd) Run(out io.Writer) error {
	_, err := fmt.Fprintf(out, "reviewledger %s (%s)\n", version, runtime.Version())
	return err
}
