print("hello from the demo repo")
