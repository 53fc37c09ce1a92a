def report(items):
    for i in items
        print(i)
