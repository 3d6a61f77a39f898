package deploy

import (
	"context"
	"fmt"
	"path/filepath"

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
