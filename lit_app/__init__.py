"""LIT front end for sequence_salience: model wrappers, datasets, layouts, client root, server."""
