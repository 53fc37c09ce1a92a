def page_count(n, size):
    return n // size


def paginate(items, page, size):
    start = page * size
    return items[start:start + size]
