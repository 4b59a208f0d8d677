#pragma once
// GUI tests reach a view's parts as a user's tools (and Qt's own tests) do: by type and object
// name under the view (QObject::findChild), not through accessors kept for tests. Throws, naming
// what was looked for, when there is none (Qt Test reports the exception as the test's failure).
#include <QObject>
#include <QString>

#include <stdexcept>
#include <string>

namespace latmix::test {

// The child of `parent` (at any depth) of type T named `name`, or the only one of its type when
// name is null.
template <class T>
T* child(const QObject* parent, const char* name = nullptr) {
    T* c = name ? parent->findChild<T*>(QString::fromLatin1(name)) : parent->findChild<T*>();
    if (!c)
        throw std::logic_error(std::string("no ") + T::staticMetaObject.className() +
                               (name ? std::string(" named '") + name + "'" : std::string()) + " under '" +
                               parent->objectName().toStdString() + "'");
    return c;
}

} // namespace latmix::test
