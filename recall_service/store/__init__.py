"""Where the recall log lives: the `LogStore` interface and its embedded SQLite store."""
