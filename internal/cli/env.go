package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
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
