package main

// The scale scenarios (scripts/bench-scale.sh runs them against one node):
//
//	raftlock-bench fill    take N locks with a long lease and keep them: the fill rate, and a
//	                       table to measure memory, snapshots and restarts with
//	raftlock-bench expiry  K leases that all end at one instant while other clients keep
//	                       taking locks: does the expiry wave stall grants?
//	raftlock-bench ready   poll a restarting node: how long until it grants a lock and
//	                       answers a read of a key it held before
//
// Each prints a small table, or with -json one JSON object on stdout.

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseFlags parses args into fs and rejects positional arguments. Like
// parseArgs, it returns flag.ErrHelp for -h and an error wrapping errUsage
// (already printed) for a bad command line.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err) // flag printed it
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return err
	}
	return nil
}

// invalid wraps a failed Validate as a usage error and prints it.
func invalid(err error, stderr io.Writer) error {
	err = fmt.Errorf("%w: %w", errUsage, err)
	fmt.Fprintln(stderr, err)
	return err
}

// usage returns a flag.Usage that prints the synopsis, then the flags.
func usage(fs *flag.FlagSet, stderr io.Writer, synopsis string) func() {
	return func() {
		fmt.Fprintf(stderr, "%s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
}
