"""Demo material: a sample table definition and realistic staging data to load into it."""
