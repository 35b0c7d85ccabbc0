"""The run phase: refs and worktrees, environments, the result store, and running the
planned arms (locally, served, or through an executor) and the speed section."""
