package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// EnvPrefix starts the environment variable of every flag: --token-file is
// also read from LEASEHOLD_TOKEN_FILE.
const EnvPrefix = "LEASEHOLD_"

// EnvName returns the environment variable that backs the flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets each flag of fs that the command line did not set from its
// environment variable (see EnvName), when that is non-empty, so that the
// command line wins over the environment and the environment over defaults.
// Call it after fs.Parse.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		name := EnvName(f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// ParseArgs reads a command line the way every verb of the binary with
// LEASEHOLD_<FLAG> variables does (serve, migrate, prune): the flags in
// args, no argument left over, then, for each flag args left out, its
// variable from getenv (ApplyEnv). As fs.Parse does, it writes what went
// wrong to fs.Output() (and the usage, for a stray argument) and returns
// the error: flag.ErrHelp for -h, any other a usage error. A value from
// the environment is quoted with any password in it masked.
func ParseArgs(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
		fmt.Fprintln(fs.Output(), err)
		fs.Usage()
		return err
	}
	if err := ApplyEnv(fs, getenv); err != nil {
		err = fmt.Errorf("%s: %s", fs.Name(), storeurl.Redact(err.Error()))
		fmt.Fprintln(fs.Output(), err)
		return err
	}
	return nil
}
