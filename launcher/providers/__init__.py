"""Node providers: one package per provider type, behind one interface."""
