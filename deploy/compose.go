package deploy

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// ComposeFile is the compose file's name at the repository root.
const ComposeFile = "docker-compose.yml"

// Load loads the compose file in repoRoot the way `docker compose` does
// (schema validation, the x-leasehold merge, YAML anchors, consistency
// checks, paths resolved against repoRoot), with an empty environment, so
// that the caller's shell cannot change what is loaded.
func Load(ctx context.Context, repoRoot string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{filepath.Join(repoRoot, ComposeFile)}, cli.WithWorkingDirectory(repoRoot))
	if err != nil {
		return nil, fmt.Errorf("compose options: %w", err)
	}
	p, err := opts.LoadProject(ctx)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", ComposeFile, err)
	}
	return p, nil
}

// HostPath is the file on the machine running compose that the container
// path name of service s shows, through the service's bind mounts (the
// deepest mount wins, as in the container); ok is false when no bind mount
// covers name. Compose has already resolved a mount's source against the
// project directory.
func HostPath(s types.ServiceConfig, name string) (host string, ok bool) {
	name = path.Clean(name)
	best := ""
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || v.Target == "" {
			continue
		}
		target := path.Clean(v.Target)
		rel, under := strings.CutPrefix(name, target+"/")
		if name == target {
			rel, under = "", true
		}
		if !under || len(target) <= len(best) {
			continue
		}
		best, host, ok = target, filepath.Join(v.Source, filepath.FromSlash(rel)), true
	}
	return host, ok
}

// WorkerCommand splits the command of a demo worker service, `python3 SCRIPT
// --flag value …` (examples/worker/worker.py, whose flags all take a value),
// into the script's path in the container and its flags.
func WorkerCommand(s types.ServiceConfig) (script string, flags map[string]string, err error) {
	if len(s.Entrypoint) != 0 {
		return "", nil, fmt.Errorf("%s: entrypoint %q: want the image's own, with the command python3 SCRIPT", s.Name, s.Entrypoint)
	}
	if len(s.Command) < 2 || s.Command[0] != "python3" || !strings.HasSuffix(s.Command[1], ".py") {
		return "", nil, fmt.Errorf("%s: command %q: want python3 SCRIPT.py --flag value …", s.Name, s.Command)
	}
	flags = map[string]string{}
	rest := s.Command[2:]
	for i := 0; i < len(rest); i++ {
		name, value, inline := strings.Cut(rest[i], "=")
		if !strings.HasPrefix(name, "--") || len(name) == 2 {
			return "", nil, fmt.Errorf("%s: command argument %q: want --flag value", s.Name, rest[i])
		}
		if !inline {
			if i+1 >= len(rest) {
				return "", nil, fmt.Errorf("%s: %s has no value", s.Name, rest[i])
			}
			i++
			value = rest[i]
		}
		if _, dup := flags[name[2:]]; dup {
			return "", nil, fmt.Errorf("%s: %s given twice", s.Name, name)
		}
		flags[name[2:]] = value
	}
	return s.Command[1], flags, nil
}
