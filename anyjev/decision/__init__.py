"""The decision: typed questions, the option layouts shown to the model, the prompt, and its label tokens."""
