"""The report phase: gate results -> the manifest (JSON) and receipt (Markdown), merged
shards, accepted slowdowns, and the receipt on the pull request."""
