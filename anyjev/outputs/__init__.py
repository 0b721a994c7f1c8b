"""The outputs: tables and figures across cells."""
