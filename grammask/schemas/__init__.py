"""JSON Schema knowledge, no automata: meta-validation, resolution, keyword detection, lowering."""
