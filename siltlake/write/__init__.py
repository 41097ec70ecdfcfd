"""Row writes of a table (docs/design.md): append, overwrite, upsert, update and delete, restore, column type
changes and other column changes, each committed as table versions through the catalog."""
