"""Pure builders for every file deploykit deploys: data first, serialised or templated last."""
