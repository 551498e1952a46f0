"""Reproductions of the five papers' figures and tables; `common` holds what the scripts share."""
